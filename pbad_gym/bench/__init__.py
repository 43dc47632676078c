"""Benchmarks that reproduce the papers' figures. One module per figure, each with
``add_arguments(parser)`` and ``run(args) -> int``; they write CSV + PNG under ``--out`` and print a table."""

# name -> module, imported lazily so `pbad-bench --help` stays fast
BENCHMARKS = {
    "fig2": "pbad_gym.bench.fig2",
    "fig3": "pbad_gym.bench.fig3",
    "order": "pbad_gym.bench.order",
    "reorder": "pbad_gym.bench.reorder",
    "amgs": "pbad_gym.bench.amgs",
    "throughput": "pbad_gym.bench.throughput",
    "search": "pbad_gym.bench.search",
    "fig5": "pbad_gym.bench.fig5",
    "envchecks": "pbad_gym.bench.envchecks",
    "scaling": "pbad_gym.bench.scaling",
    "fig4": "pbad_gym.bench.fig4",
    "energy": "pbad_gym.bench.energy",
    "contact": "pbad_gym.bench.contact",
    "threads": "pbad_gym.bench.threads",
    "scaling-n": "pbad_gym.bench.scaling_n",
    "learnability": "pbad_gym.bench.learnability",
    "gradients": "pbad_gym.bench.gradients",
}
