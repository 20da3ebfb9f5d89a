"""A typical wrong answer for chapter 2: the masked softmax that fills padding with -1e9.

It gives the right weights while a row has at least one real position, but a row of all
padding gets uniform weights (1/S on every padded key) instead of zeros.
"""

EXERCISE = "ex3_masked_softmax"
SOURCE = """def masked_softmax(scores, mask):
    \"\"\"Softmax over the last axis where mask is True.\"\"\"
    return torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)
"""
