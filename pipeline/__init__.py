"""The pipelines as library functions over typed configs, which ``realm demo``, ``realm real-text`` and the benchmarks
and experiments call: the demo (``DemoConfig``, ``run_demo``) and its synthetic data, the real-text pipeline, the warm
start, the pre-training and QA stages they share, the stage configs they build alike (``builders``) and the folders they
write (``layout``)."""
