"""Judge-corrected estimates (PPI++) from blind human labels."""
