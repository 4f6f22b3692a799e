"""The terminal interfaces: the ``branchpoint`` command (``tui.cli``, verbs in ``tui/commands``)
and the Textual app (``tui.app``, ``branchpoint tui``): browse runs and conversations, read
transcripts with their verdicts, compare matched arms, label blind, watch a run.

The app writes only human labels (``core.records.HumanLabel``).
"""
