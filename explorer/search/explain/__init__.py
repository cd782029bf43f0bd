"""Explanations beyond a result's own trace: why a note the user expected is not in the top k."""
