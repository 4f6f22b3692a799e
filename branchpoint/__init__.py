"""branchpoint: multi-turn safety evaluation of chatbots with vulnerable users."""
