"""The pipelines as library functions over typed configs, which ``realm demo``, ``realm real-text`` and bench/ call:
the demo's synthetic data, the real-text data, the warm start, and the pre-training and QA stages they share."""
