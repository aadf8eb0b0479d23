"""The ``evoharness`` command line: a package of its own, above the library (``evoharness``) and the
warehouse. It imports no Dagster at import time; only ``evoharness init`` loads it, to set up an instance."""
