"""Credit assignment of the add-on methods: pure functions from reward tables to advantages.

One module per method (``dense``: DenseGRPO, ``turning_point``: TP-GRPO, ``granular``: G²RPO,
``entropy``: E-GRPO); each function takes tensors and group ids, never a trainer or a pipeline, and cites
the equation of ``specs/addon_methods.md`` it implements.
"""
