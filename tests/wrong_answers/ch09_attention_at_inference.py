"""Plausible wrong answers to chapter 9's exercises.

``HIDDEN_ONLY``: for each exercise, a wrong answer that passes the visible tests and fails the hidden ones.
"""

EXERCISE = "ex1_scale"

SOURCE = '''def scale(x, factor):
    return x + factor
'''

HIDDEN_ONLY = {
    # Always float32: right on the visible float32 vector, wrong in dtype for float64.
    "ex1_scale": '''def scale(x, factor):
    return (x * factor).float()
''',
    # Rounds the offset to an int: right for the visible 2.0, wrong for 0.25 and 7.5.
    "ex2_shift": '''def shift(x, offset):
    return x + int(offset)
''',
}
