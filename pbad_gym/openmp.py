"""OpenMP's wait policy for the whole process, set when pbad_gym is imported (before anything loads GNU OpenMP).

The compiled kernel's threads and PyTorch's share GNU OpenMP, whose threads spin while they wait by default. On a
shared or busy CPU a spinning pool stalls: SB3's PPO on 8 Swimmer envs with two busy processes beside it took
22-43 s with spinning threads against 9-10 s with sleeping ones (BENCHMARKS.md, "Threads"). libgomp reads
``OMP_WAIT_POLICY`` once, when it loads, so the package sets it (``PASSIVE``, unless the user set it) at import; when
torch was imported first the setting comes too late, and a warning says what to do.
"""
from __future__ import annotations

import logging
import os
import sys

TOO_LATE = "OMP_WAIT_POLICY" not in os.environ and "torch" in sys.modules
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if TOO_LATE:
    logging.getLogger("pbad_gym").warning(
        "pbad_gym: PyTorch was imported before pbad_gym with OMP_WAIT_POLICY unset, so OpenMP's threads (torch's "
        "and the simulation kernel's) spin while they wait, which slows both several-fold on a busy CPU; import "
        "pbad_gym before torch (or stable_baselines3), or set OMP_WAIT_POLICY=PASSIVE")
