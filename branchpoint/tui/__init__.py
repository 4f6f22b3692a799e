"""The terminal interfaces: the ``branchpoint`` command (``branchpoint.tui.cli``, verbs in ``branchpoint/tui/commands``)
and the Textual app (``branchpoint.tui.app``, ``branchpoint tui``): browse runs and conversations, read
transcripts with their verdicts, compare matched arms, label blind, watch a run.

The app writes only human labels (``branchpoint.core.records.HumanLabel``).
"""
