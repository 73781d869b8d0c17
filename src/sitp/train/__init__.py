"""Training as an application (chapters 3.1 and 3.5): the layer above the PyTorch mirror.

* ``trainer``     the training loop, evaluation, the optimizer and schedule it builds
* ``checkpoint``  checkpoints written atomically, resumed bit for bit
* ``cli``         ``python -m sitp train | sample | resume``
* ``scaling``     the Chinchilla law L(N, D) fitted to runs, its bootstrap and frontier (5.5)
"""
