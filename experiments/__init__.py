"""The studies, one folder each (README.md here lists them): scripts run as ``python -m experiments.STUDY.X`` from the
repository root. Not installed with the package; nothing outside this folder imports a study."""
