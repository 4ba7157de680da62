"""The speed checks a user runs to size hardware: each module with a ``main`` is run as ``python -m benchmarks.X`` from
the repository root (README.md here lists them). Not installed with the package; nothing outside this folder and
``experiments/`` imports it."""
