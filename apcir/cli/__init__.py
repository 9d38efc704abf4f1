"""The ``apcir`` command line."""
