"""The verbs of the ``branchpoint`` command, one module per stage of the flow."""
