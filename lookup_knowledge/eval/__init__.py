"""Batch evaluation (``[eval]`` extra): eval data, the evaluation runner, comparisons, reports."""
