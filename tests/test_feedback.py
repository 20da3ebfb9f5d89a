"""Feedback pages name each graded cell by its exercise and wrap long messages (course_utils/grading/feedback.py)."""

from course_utils.grading.feedback import name_exercises

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
