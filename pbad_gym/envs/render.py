"""A small software renderer (NumPy ray casting, no OpenGL) and GIF writing.

Capsules and spheres of a body's ``meta["segments"]`` / ``meta["spheres"]`` are intersected analytically with one
camera ray per pixel and shaded (Lambert + ambient + a specular highlight); robots with feet get a checkered
ground plane with grid lines and hard shadows. The camera follows the centre of mass.
"""
from __future__ import annotations

import numpy as np

from ..arrays import to_numpy
from ..dynamics import centre_of_mass
from ..kinematics import forward_kinematics

LIGHT = np.array([-0.4, -0.5, 1.0]) / np.linalg.norm([-0.4, -0.5, 1.0])
PALETTE = np.array([[0.90, 0.55, 0.20], [0.25, 0.55, 0.85], [0.35, 0.70, 0.35], [0.80, 0.30, 0.35],
                    [0.60, 0.45, 0.75]])


def _capsule_hit(ro, rd, pa, pb, r):
    """Ray parameter t (N,) of the first hit of rays ro + t·rd (ro (N, 3) or (3,), rd (N, 3) unit) with the
    capsule pa-pb of radius r (inf where missed or behind)."""
    ba = pb - pa
    baba = float(ba @ ba)
    oa = ro - pa
    if baba < 1e-18:  # a sphere
        b = np.sum(rd * oa, -1)
        c = np.sum(oa * oa, -1) - r * r
        h = b * b - c
        t = -b - np.sqrt(np.maximum(h, 0.0))
        return np.where((h > 0) & (t > 1e-6), t, np.inf)
    bard = rd @ ba
    baoa = oa @ ba
    rdoa = np.sum(rd * oa, -1)
    oaoa = np.sum(oa * oa, -1)
    a = baba - bard * bard
    b = baba * rdoa - baoa * bard
    c = baba * oaoa - baoa * baoa - r * r * baba
    h = b * b - a * c
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (-b - np.sqrt(np.maximum(h, 0.0))) / np.where(np.abs(a) < 1e-12, 1e-12, a)
    y = baoa + t * bard
    body = (h >= 0) & (y > 0) & (y < baba)
    oc = np.where((y <= 0)[..., None], oa, ro - pb)
    b2 = np.sum(rd * oc, -1)
    c2 = np.sum(oc * oc, -1) - r * r
    h2 = b2 * b2 - c2
    tc = -b2 - np.sqrt(np.maximum(h2, 0.0))
    t = np.where(body, t, np.where((h >= 0) & (h2 > 0), tc, np.inf))
    return np.where(t > 1e-6, t, np.inf)


def _capsule_normal(p, pa, pb, r):
    ba = pb - pa
    baba = max(float(ba @ ba), 1e-18)
    h = np.clip(((p - pa) @ ba) / baba, 0.0, 1.0)
    n = p - pa - h[..., None] * ba
    return n / np.maximum(np.linalg.norm(n, axis=-1, keepdims=True), 1e-12)


def primitives(body, R, t):
    """World capsules [(pa, pb, radius, colour index)] of one configuration (R (L, 3, 3), t (L, 3))."""
    out = []
    meta = body.meta
    for link, p0, p1, rad in meta.get("segments", []):
        out.append((R[link] @ p0 + t[link], R[link] @ p1 + t[link], float(rad), link % len(PALETTE)))
    for link, c, rad in meta.get("spheres", []):
        p = R[link] @ c + t[link]
        out.append((p, p, float(rad), 4))
    return out


def render_scene(prims, target, width=320, height=240, ground=True, distance=4.0, elevation=0.45, azimuth=-1.9,
                 fov=50.0, ground_z=0.0):
    """RGB image (height, width, 3) uint8 of capsule primitives seen from a camera aimed at ``target``; with
    ``ground`` a checkered plane with 1 m grid lines at height ``ground_z`` [m] (the floor of walkers, a sea bed
    that makes a swimmer's progress visible)."""
    target = np.asarray(target, float)
    eye = target + distance * np.array([np.cos(elevation) * np.cos(azimuth), np.cos(elevation) * np.sin(azimuth),
                                        np.sin(elevation)])
    f = (target - eye) / np.linalg.norm(target - eye)
    right = np.cross(f, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, f)
    th = np.tan(np.deg2rad(fov) / 2)
    xs = (2 * (np.arange(width) + 0.5) / width - 1) * th * width / height
    ys = (1 - 2 * (np.arange(height) + 0.5) / height) * th
    rd = f + xs[None, :, None] * right + ys[:, None, None] * up
    rd = (rd / np.linalg.norm(rd, axis=-1, keepdims=True)).reshape(-1, 3)
    n_rays = rd.shape[0]
    # background: a vertical gradient (sky for walkers, water for swimmers)
    sky = np.array([0.80, 0.86, 0.95]) if ground else np.array([0.55, 0.75, 0.90])
    img = sky * (0.75 + 0.25 * np.clip(rd[:, 2:3] + 0.5, 0, 1))
    depth = np.full(n_rays, np.inf)
    if ground:
        with np.errstate(divide="ignore", invalid="ignore"):
            tg = np.where(rd[:, 2] < -1e-6, (ground_z - eye[2]) / rd[:, 2], np.inf)
        hit = np.isfinite(tg)
        p = eye + tg[hit, None] * rd[hit]
        checker = (np.floor(p[:, 0]) + np.floor(p[:, 1])) % 2
        col = np.where(checker[:, None] > 0, [0.62, 0.64, 0.66], [0.72, 0.74, 0.76])
        frac = np.abs(p[:, :2] - np.round(p[:, :2]))
        line = np.min(frac, -1) < 0.015 * np.maximum(1.0, tg[hit] / 4)
        col = np.where(line[:, None], [0.45, 0.47, 0.50], col)
        shadow = np.zeros(len(p), dtype=bool)
        if prims:  # only ground points under the bodies' shadow footprint can be shadowed
            ends = np.array([e for pa, pb, _, _ in prims for e in (pa, pb)])
            lift = np.max(np.maximum(ends[:, 2] - ground_z, 0))
            reach = max(r for _, _, r, _ in prims) + lift * np.hypot(*LIGHT[:2]) / LIGHT[2]
            lo, hi = ends[:, :2].min(0) - reach, ends[:, :2].max(0) + reach
            near = np.nonzero(np.all((p[:, :2] >= lo) & (p[:, :2] <= hi), axis=1))[0]
            pn = p[near] + 1e-4 * LIGHT
            hit_any = np.zeros(len(near), dtype=bool)
            for pa, pb, rad, _ in prims:
                hit_any |= np.isfinite(_capsule_hit(pn, np.broadcast_to(LIGHT, pn.shape), pa, pb, rad))
            shadow[near] = hit_any
        col = col * np.where(shadow, 0.6, 1.0)[:, None]
        fade = np.exp(-tg[hit] / 30.0)[:, None]
        img[hit] = fade * col + (1 - fade) * img[hit]
        depth[hit] = tg[hit]
    for pa, pb, rad, ci in prims:
        tc = _capsule_hit(eye, rd, pa, pb, rad)
        near = tc < depth
        if not near.any():
            continue
        depth[near] = tc[near]
        p = eye + tc[near, None] * rd[near]
        n = _capsule_normal(p, pa, pb, rad)
        lam = np.clip(n @ LIGHT, 0.0, 1.0)
        refl = LIGHT - 2 * (n @ LIGHT)[:, None] * n
        spec = np.clip(np.sum(refl * rd[near], -1), 0.0, 1.0) ** 20
        img[near] = PALETTE[ci] * (0.30 + 0.70 * lam[:, None]) + 0.35 * spec[:, None]
    return (np.clip(img, 0, 1).reshape(height, width, 3) * 255).astype(np.uint8)


def with_render_fps(metadata, dt):
    """A copy of an env's ``metadata`` with ``render_fps`` = 1/Δt (``dt`` [s]): one frame per env step."""
    return {**metadata, "render_fps": max(1, int(round(1.0 / dt)))}


def render_frames(body, q=None, kin=None, width=320, height=240):
    """Frames (a list of (height, width, 3) uint8 images) of ``body`` at configurations q (n, nq), or at their
    forward kinematics ``kin``; the camera aims at each pose's centre of mass. What to draw comes from
    ``body.meta`` (segments, spheres; "feet": a walker on a ground plane; "seabed_depth": a grid that far below a
    swimmer)."""
    if kin is None:
        if q is None:
            raise ValueError("render_frames needs q (n, nq) or kin (forward kinematics)")
        kin = forward_kinematics(body, q)
    R, t = to_numpy(kin.R), to_numpy(kin.t)
    com = to_numpy(centre_of_mass(body, kin=kin))
    meta = body.meta
    walker = "feet" in meta
    seabed = meta.get("seabed_depth")  # swimmers: a grid below the body so that forward motion shows
    frames = []
    for k in range(len(R)):
        target = com[k].copy()
        if walker:
            target[2] = 0.5 * target[2]
        ground_z = 0.0 if walker or seabed is None else com[k, 2] - seabed
        frames.append(render_scene(primitives(body, R[k], t[k]), target, width, height,
                                   ground=walker or seabed is not None, distance=3.5 if walker else 4.5,
                                   elevation=0.4 if walker else 0.9, ground_z=ground_z))
    return frames


def write_gif(frames, path, fps=20):
    """Write RGB frames (each (H, W, 3) uint8) to an animated GIF at ``path``."""
    from PIL import Image

    frames = [np.asarray(f, dtype=np.uint8) for f in frames]
    if not frames:
        raise ValueError("write_gif needs at least one frame")
    images = [Image.fromarray(f) for f in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=int(round(1000 / fps)), loop=0)
    return path


def record_rollout(env, path, steps=200, policy=None, seed=0, every=1):
    """Roll out a single env (``render_mode="rgb_array"``) for ``steps`` steps under ``policy(obs) -> action``
    (default: zero actions), rendering every ``every``-th step, and write a GIF to ``path``. Returns the path."""
    if getattr(env, "render_mode", None) != "rgb_array":
        raise ValueError("record_rollout needs an env made with render_mode='rgb_array'")
    obs, _ = env.reset(seed=seed)
    frames = [env.render()]
    for k in range(steps):
        action = np.zeros(env.action_space.shape, env.action_space.dtype) if policy is None else policy(obs)
        obs, _, terminated, truncated, _ = env.step(action)
        if k % every == 0:
            frames.append(env.render())
        if terminated or truncated:
            break
    fps = max(1, int(round(1.0 / (env.unwrapped.dt * every))))
    return write_gif(frames, path, fps=fps)
