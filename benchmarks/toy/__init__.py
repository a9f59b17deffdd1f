"""The toy GenEval benchmark: GenEval's six tasks in a synthetic world of coloured shapes, on a CPU.

Modules: ``world`` (shapes, colours, prompts and metadata in GenEval's format, train / held-out splits,
the renderer), ``detect`` (an exact detector feeding GenEval's rule engine), ``reward`` (the
``toy_geneval`` reward), ``pretrain`` (a small SD3 pretrained on renders, cached as a diffusers
pipeline), ``evaluate`` (sampling and scoring), ``cli`` (``flowrl eval toy``) and ``compare`` (every method
on the same budget: a table and a plot). Importing this package loads neither torch nor diffusers.
"""
