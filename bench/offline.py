"""Imported first by the real-data benchmarks (`python bench/X.py`): nothing may reach a model hub or W&B, and the
repository is importable. It must run before transformers or datasets are imported."""

import os
import sys
from pathlib import Path

for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_name, "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
