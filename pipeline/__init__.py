"""The pipelines as library functions over typed configs, which ``realm demo``, ``realm real-text`` and bench/ call:
the demo (``DemoConfig``, ``run_demo``) and its synthetic data, the real-text pipeline, the warm start, and the
pre-training and QA stages they share."""
