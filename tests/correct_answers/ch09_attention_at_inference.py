"""Correct answers to chapter 9's exercises, written differently from the solution."""

CORRECT = {
    "ex1_scale": {
        "torch.mul": '''def scale(x, factor):
    return torch.mul(x, factor)
''',
        "factor first": '''def scale(x, factor):
    return factor * x
''',
    },
    "ex2_shift": {
        "torch.add": '''def shift(x, offset):
    return torch.add(x, offset)
''',
        "offset first": '''def shift(x, offset):
    return offset + x
''',
    },
}
