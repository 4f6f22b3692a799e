"""The terminal UI (Textual): browse, step through and compare branches, label turns.

Not built yet; no issue has asked for it so far. Human labels already have their table
(``core.records.HumanLabel``), which is the only thing the UI will write.
"""
