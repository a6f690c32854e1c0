"""The test suite: a package, so every test module is imported as ``tests.…`` and no folder of
it becomes a top-level name that could shadow an installed package (``tests/kernels`` once hid
the ``kernels`` package transformers imports)."""
