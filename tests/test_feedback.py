"""Feedback pages name each graded cell by its exercise and wrap long messages (grader/course_grading/feedback.py)."""

from course_grading.feedback import name_exercises

TOC = ('<html><head></head><body><ol>'
       '<li><a href="#ex3_attention-visible">Test cell</a> (Score: 2.0 / 2.0)</li>'
       '<li><a href="#ex3_attention-hidden">Test cell</a> (Score: 0.0 / 3.0)</li>'
       '<li><a href="#q1_scale">Written response</a> (Score: 1.0 / 2.0)</li>'
       '<li><a href="#comment-q1_scale">Comment</a></li></ol></body></html>')


def test_contents_list_names_exercises():
    html = name_exercises(TOC)
    for want in ('>ex3_attention: visible tests</a>', '>ex3_attention: hidden tests</a>',
                 '>q1_scale: written response</a>', '>comment on q1_scale</a>'):
        assert want in html
    assert ">Test cell<" not in html and ">Comment<" not in html


def test_long_lines_wrap_once():
    html = name_exercises(name_exercises(TOC))
    assert html.count("white-space: pre-wrap") == 1 and html.index("pre-wrap") < html.index("</head>")


def test_math_travels_inside_the_page_under_a_strict_policy():
    import base64
    import hashlib
    import re

    from course_grading.feedback import offline_math

    page = ('<html><head><script src="https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/latest.js?config=x">'
            '</script>\n<script type="text/x-mathjax-config">MathJax.Hub.Config({});</script>'
            "<style>@font-face{font-family:'Glyphicons Halflings';src:url(../fonts/g.woff)}</style></head>"
            "<body>$x^2$</body></html>")
    html = offline_math(page)
    assert "cdnjs" not in html and "x-mathjax-config" not in html and "Glyphicons" not in html
    assert offline_math(html) == html, "processing twice changes the page"
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    assert "default-src 'none'" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
    assert len(scripts) == 2 and "MathJax" in scripts[1] and len(scripts[1]) > 1_000_000
    for code in scripts:
        digest = base64.b64encode(hashlib.sha256(code.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in csp, "a script the policy does not allow"


def test_from_the_first_hidden_test_on_only_the_graders_words_reach_feedback():
    import nbformat

    from course_grading import feedback
    from course_grading.results import NOT_CONFIRMED

    def test_cell(src, outputs):
        c = nbformat.v4.new_code_cell(src, metadata={"nbgrader": {"grade": True, "solution": False, "grade_id": "t"}})
        c.outputs = outputs
        return c

    said = nbformat.v4.new_output("stream", name="stdout", text="the kernel's words\n")
    kernel_error = nbformat.v4.new_output("error", ename="ValueError", evalue="aGlkZGVu", traceback=[])
    grader_error = nbformat.v4.new_output("error", ename=NOT_CONFIRMED, evalue="check 1 failed", traceback=[])
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print(1)"), test_cell("visible", [said]),
                test_cell("### BEGIN HIDDEN TESTS\nx\n### END HIDDEN TESTS", [said, kernel_error, grader_error]),
                nbformat.v4.new_code_cell("print(2)"), nbformat.v4.new_markdown_cell("text"),
                test_cell("later visible", [said])]
    nb.cells[0].outputs = [said]
    nb.cells[3].outputs = [said]
    feedback.WithholdAfterHidden().preprocess(nb, {})
    assert nb.cells[0].outputs == [said] and nb.cells[1].outputs == [said]      # before: as they were
    assert nb.cells[2].outputs == [grader_error]                               # the grader's error only
    assert "withheld" in nb.cells[3].outputs[0]["text"] and nb.cells[5].outputs == []


def test_learner_text_cannot_turn_the_policy_off(tmp_path, monkeypatch):
    """A cell that says "Content-Security-Policy" (issue 48) leaves the page under its policy; so does
    a machine without the MathJax package (then no script may run) and a page without a head."""
    import re

    from course_grading import feedback

    page = ("<html><head><title>x</title></head><body><p>my notes on Content-Security-Policy and "
            '&lt;meta http-equiv="Content-Security-Policy"&gt;</p><img src="https://example.org/x.png"></body></html>')
    path = tmp_path / "feedback.html"
    path.write_text(page)
    feedback.sanitise_html_file(path)
    html = path.read_text()
    head = html[:html.index("</head>")]
    assert re.search(r'<meta http-equiv="Content-Security-Policy" content="default-src \'none\'', head), head[:300]
    monkeypatch.setattr(feedback, "_mathjax_source", lambda: None)
    for text in (page, "<p>no head at all</p>"):
        html = feedback.offline_math(text)
        assert "script-src 'none'" in html.split("</head>")[0] and "<script" not in html, html[:300]
