"""workbench.fdg.analysis: the names a cell reads (inputs) and binds (writes), in order and scope."""

from __future__ import annotations

import sys

import pytest

from workbench.fdg.analysis import CellAnalysis, analyse_code, parse_cell
from workbench.errors import FragmentError, FragmentSyntaxError, WorkbenchError


def io(code: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    found = analyse_code(code)
    assert isinstance(found, CellAnalysis)
    return found.inputs, found.writes


def inputs(code: str) -> tuple[str, ...]:
    return analyse_code(code).inputs


def writes(code: str) -> tuple[str, ...]:
    return analyse_code(code).writes


# ----------------------------------------------------------------------------- order
def test_docstring_example():
    assert io("y = x + 1\nz = f(y)") == (("x", "f"), ("y", "z"))


@pytest.mark.parametrize("code", ["y = 1; z = y", "y = 1\nz = y", "y = 1\nprint(y)"])
def test_name_bound_before_read_is_not_an_input(code):
    assert inputs(code) == ()


def test_name_read_before_bound_is_an_input():
    assert io("z = y\ny = 1") == (("y",), ("z", "y"))


def test_inputs_and_writes_keep_first_use_order_without_duplicates():
    assert io("c = b + a + b\na = c + d\nb = a") == (("b", "a", "d"), ("c", "a", "b"))


def test_augmented_assignment_reads_then_writes():
    assert io("x += 1") == (("x",), ("x",))
    assert io("x = 0\nx += 1") == ((), ("x",))


def test_assignment_value_is_evaluated_before_targets():
    assert io("x = x + 1") == (("x",), ("x",))
    assert io("a = b = c") == (("c",), ("a", "b"))


def test_name_bound_in_one_branch_counts_as_written():
    assert io("if c:\n    w = 1\nr = w") == (("c",), ("w", "r"))


def test_while_loop_reads_its_condition_before_rebinding_it():
    assert io("while cond:\n    cond = step(cond)") == (("cond", "step"), ("cond",))


def test_try_finally_bodies():
    assert io("try:\n    x = a\nfinally:\n    y = b") == (("a", "b"), ("x", "y"))


def test_starred_and_keyword_call_arguments_are_reads():
    assert io("f(*args, **kw)") == (("f", "args", "kw"), ())


def test_fstring_parts_are_reads():
    assert io("s = f'{val:{width}}'") == (("val", "width"), ("s",))


# ----------------------------------------------------------------------------- nested scopes
def test_function_body_reads_are_inputs_but_not_its_parameters_or_locals():
    assert io("def f(p, *args, k=1, **kw):\n    q = p + g\n    return q + h + args + kw\n") == (("g", "h"), ("f",))


def test_function_reading_a_name_the_cell_binds_later_is_not_an_input():
    assert io("def f():\n    return later\nlater = 1\n") == ((), ("f", "later"))
    assert io("f = lambda: z\nz = 1") == ((), ("f", "z"))


def test_function_reading_a_name_bound_earlier_is_not_an_input():
    assert io("z = 0\ndef f():\n    return z\n") == ((), ("z", "f"))


def test_function_local_shadows_outer_name():
    assert inputs("def f():\n    x = 1\n    return x\n") == ()
    # bound anywhere in the body makes it local, even after the read (UnboundLocalError at runtime)
    assert inputs("def f():\n    y = x\n    x = 2\n") == ()


def test_function_local_imports_walrus_and_match_bindings_stay_local():
    assert inputs("def f():\n    import numpy as np\n    return np\n") == ()
    assert inputs("def f():\n    if (n := g()):\n        return n\n") == ("g",)
    assert inputs("def f(c):\n    match c:\n        case [a]:\n            return a\n") == ()
    assert inputs("def f():\n    try:\n        pass\n    except E as e:\n        return e\n") == ("E",)


def test_lambda_reads_free_names_not_parameters():
    assert io("f = lambda a, b=dflt: a + b + free") == (("dflt", "free"), ("f",))
    assert io("f = lambda x: x") == ((), ("f",))


def test_comprehension_reads_free_names_not_its_targets():
    assert io("out = [i * k for i in items if i > thr]") == (("items", "thr", "k"), ("out",))
    assert io("d = {k: v for k, v in pairs}") == (("pairs",), ("d",))
    assert io("s = {x for x in xs}") == (("xs",), ("s",))
    assert io("t = sum(x * w for x in xs)") == (("xs", "w"), ("t",))


def test_nested_comprehension_targets_are_bound_in_later_generators():
    assert io("out = [j for i in rows for j in i if j > thr]") == (("rows", "thr"), ("out",))
    assert io("d = {k: v for k in ks for v in vs(k)}") == (("ks", "vs"), ("d",))


def test_comprehension_first_iterable_runs_in_the_enclosing_scope():
    # x = [x for x in x]: the iterable x is the outer x (an input), the target is local
    assert io("x = [x for x in x]") == (("x",), ("x",))


def test_comprehension_variable_does_not_leak():
    assert io("out = [i for i in r]\nz = i") == (("r", "i"), ("out", "z"))


def test_lambdas_inside_comprehensions():
    assert io("fs = [lambda: i + j for i in r]") == (("r", "j"), ("fs",))


def test_nested_function_reads_reach_the_cell_unless_an_enclosing_function_binds_them():
    assert io("def outer():\n    def inner():\n        return deep\n    return inner\n") == (("deep",), ("outer",))
    assert inputs("def outer(deep):\n    def inner():\n        return deep\n    return inner\n") == ()


def test_nonlocal_is_not_a_cell_write():
    code = "def outer():\n    v = 1\n    def inner():\n        nonlocal v\n        v = 2\n    return inner\n"
    assert io(code) == ((), ("outer",))


def test_async_function_and_async_for():
    assert io("async def f():\n    async for x in src:\n        await g(x)\n") == (("src", "g"), ("f",))


# ----------------------------------------------------------------------------- mutation vs rebinding
@pytest.mark.parametrize(
    "code, expected_inputs",
    [
        ("obj.attr = 1", ("obj",)),
        ("a.b.c = d", ("d", "a")),
        ("obj[i] = v", ("v", "obj", "i")),
        ("a[i:j] = b", ("b", "a", "i", "j")),
        ("obj.x += 1", ("obj",)),
        ("obj[k] += v", ("v", "obj", "k")),
        ("del obj.attr", ("obj",)),
        ("del obj[k]", ("obj", "k")),
    ],
)
def test_attribute_and_subscript_mutation_is_a_read_not_a_write(code, expected_inputs):
    assert io(code) == (expected_inputs, ())


def test_mutating_a_name_the_cell_bound_is_not_an_input():
    assert io("buf = []\nbuf.append(x)\nbuf[0] = y") == (("x", "y"), ("buf",))


# ----------------------------------------------------------------------------- global
def test_global_assigned_in_a_function_is_a_write():
    assert io("def f():\n    global G\n    G = 1\n") == ((), ("G", "f"))


@pytest.mark.parametrize("body", ["G += 1", "del G", "for G in range(3):\n        pass"])
def test_global_rebound_in_a_function_any_way_is_a_write(body):
    assert writes(f"def f():\n    global G\n    {body}\n") == ("G", "f")


def test_global_only_read_in_a_function_is_an_input():
    assert io("def f():\n    global G\n    return G\n") == (("G",), ("f",))


def test_cell_reading_a_global_before_the_function_that_writes_it():
    assert io("z = G\ndef f():\n    global G\n    G = 1\n") == (("G",), ("z", "G", "f"))
    assert io("def f():\n    global G\n    G = 1\nz = G") == ((), ("G", "f", "z"))


def test_global_statement_at_top_level_is_harmless():
    assert io("global G\nG = 1") == ((), ("G",))


# ----------------------------------------------------------------------------- imports
@pytest.mark.parametrize(
    "code, bound",
    [
        ("import a.b as c", ("c",)),
        ("import a.b", ("a",)),
        ("import a.b.c, d", ("a", "d")),
        ("import numpy as np", ("np",)),
        ("from m import x as y, z", ("y", "z")),
        ("from . import sibling", ("sibling",)),
        ("from m import *", ()),
    ],
)
def test_imports_bind_names(code, bound):
    assert io(code) == ((), bound)


def test_imported_name_is_not_an_input_afterwards():
    assert io("import numpy as np\nx = np.zeros(n)") == (("n",), ("np", "x"))


# ----------------------------------------------------------------------------- binding statements
def test_for_targets_and_else():
    assert io("for i, (j, k) in pairs:\n    s = i + j\n") == (("pairs",), ("i", "j", "k", "s"))
    assert io("for i in xs:\n    pass\nelse:\n    r = i\n") == (("xs",), ("i", "r"))


def test_for_iterable_is_read_before_the_target_binds():
    assert io("for x in x:\n    pass") == (("x",), ("x",))


def test_with_targets():
    assert io("with open(p) as fh, lock:\n    d = fh.read()") == (("p", "lock"), ("fh", "d"))
    assert io("with ctx() as (a, b):\n    pass") == (("ctx",), ("a", "b"))


def test_except_handler_binds_its_name_and_reads_its_type():
    assert io("try:\n    x = f()\nexcept ValueError as err:\n    msg = str(err)\n") == (("f",), ("x", "err", "msg"))
    assert io("try:\n    pass\nexcept (MyError, OtherError):\n    pass") == (("MyError", "OtherError"), ())


@pytest.mark.skipif(sys.version_info < (3, 11), reason="except* needs Python 3.11")
def test_except_star_handler():
    assert io("try:\n    pass\nexcept* MyError as eg:\n    r = eg\n") == (("MyError",), ("eg", "r"))


def test_walrus_binds_after_its_value_is_read():
    assert io("if (n := len(xs)) > 1:\n    m = n\n") == (("xs",), ("n", "m"))
    assert io("(x := x + 1)") == (("x",), ("x",))


def test_tuple_and_starred_unpacking():
    assert io("a, *b = c") == (("c",), ("a", "b"))


def test_annotated_assignment():
    assert io("x: int = y") == (("y",), ("x",))
    assert io("x: T = 1") == (("T",), ("x",))


def test_del_of_a_name_counts_as_a_write():
    assert io("del x") == ((), ("x",))
    assert io("x = 1\ndel x\ny = x") == ((), ("x", "y"))


def test_match_patterns_bind_capture_names_and_read_classes_and_values():
    code = (
        "match cmd:\n"
        "    case [first, *rest]:\n"
        "        a = first\n"
        "    case {'k': v, **others}:\n"
        "        b = v\n"
        "    case Point(x=px) as pt:\n"
        "        c = pt\n"
        "    case Color.RED:\n"
        "        e = 1\n"
        "    case _:\n"
        "        d = 0\n"
    )
    assert io(code) == (
        ("cmd", "Point", "Color"),
        ("first", "rest", "a", "v", "others", "b", "px", "pt", "c", "e", "d"),
    )


def test_match_or_pattern_and_guard():
    code = "match p:\n    case (1 | 2) as n if n > lim:\n        r = n\n"
    assert io(code) == (("p", "lim"), ("n", "r"))


# ----------------------------------------------------------------------------- classes
def test_class_reads_bases_keywords_and_body_and_binds_its_name():
    code = "class A(Base, metaclass=Meta):\n    attr = val\n    def m(self):\n        return other\n"
    assert io(code) == (("Base", "Meta", "val", "other"), ("A",))


def test_class_body_names_are_not_inputs_of_the_body():
    assert io("class A:\n    x = 1\n    y = x + 1\n") == ((), ("A",))


def test_class_body_comprehension_first_iterable_reads_class_scope():
    assert io("class C:\n    xs = [i for i in rng]\n") == (("rng",), ("C",))


# ----------------------------------------------------------------------------- builtins
def test_builtins_are_not_inputs():
    assert io("n = len(xs); p = print; e = ValueError") == (("xs",), ("n", "p", "e"))


def test_rebound_builtin_is_an_ordinary_name():
    assert io("len = 3\nn = len") == ((), ("len", "n"))
    # read before the cell rebinds it: an input (its first value comes from outside)
    assert io("n = len(xs)\nlen = 3") == (("len", "xs"), ("n", "len"))


def test_builtin_read_late_in_a_function_and_rebound_is_not_an_input():
    assert io("def f():\n    return len\nlen = 3") == ((), ("f", "len"))


# ----------------------------------------------------------------------------- eager evaluation
def test_decorators_and_defaults_are_evaluated_eagerly():
    code = "@deco(arg)\ndef f(a=dflt, *, b=kwd):\n    return a\n"
    assert io(code) == (("deco", "arg", "dflt", "kwd"), ("f",))


def test_decorator_read_before_the_cell_binds_it_is_an_input():
    assert io("@d\ndef f():\n    pass\nd = 1") == (("d",), ("f", "d"))


def test_default_read_before_the_cell_binds_it_is_an_input():
    assert io("def f(a=q):\n    return a\nq = 1") == (("q",), ("f", "q"))
    assert io("g = lambda a=q: a\nq = 1") == (("q",), ("g", "q"))


def test_lambda_default_containing_a_lambda():
    assert io("def f(a=lambda: q):\n    pass") == (("q",), ("f",))


def test_return_annotation_is_read():
    assert io("def f() -> R:\n    pass") == (("R",), ("f",))


# ----------------------------------------------------------------------------- syntax errors
def test_syntax_error_names_the_fragment_and_cell_line():
    with pytest.raises(FragmentSyntaxError, match=r"fragment 'actor': syntax error at cell line 2") as info:
        analyse_code("x = 1\ny = (\n", fragment="actor")
    err = info.value
    assert err.line == 2
    assert err.fragment == "actor"
    assert "the FDG is unchanged" in str(err)
    assert isinstance(err, FragmentError) and isinstance(err, WorkbenchError)
    assert err.__cause__ is None and err.__suppress_context__  # raised "from None"


def test_syntax_error_shows_the_offending_text():
    with pytest.raises(FragmentSyntaxError, match=r"line 1: def f\(:") as info:
        parse_cell("def f(:\n    pass", fragment="env")
    assert info.value.line == 1


def test_syntax_error_with_default_fragment_name():
    with pytest.raises(FragmentSyntaxError, match=r"fragment '<cell>'"):
        analyse_code("1 +")


def test_indentation_error_is_a_fragment_syntax_error():
    with pytest.raises(FragmentSyntaxError, match="line 2") as info:
        analyse_code("if x:\npass", fragment="env")
    assert info.value.line == 2


def test_fragment_syntax_error_without_a_line():
    err = FragmentSyntaxError("env", None, "bad", None)
    assert "an unknown line" in str(err) and err.line is None


def test_empty_and_comment_only_cells():
    assert io("") == ((), ())
    assert io("# nothing here\n") == ((), ())


# ----------------------------------------------------------------------------- known bugs
def test_bug_list_comprehension_reads_before_the_cell_binds_are_inputs():
    assert inputs("y = [x for _ in r]\nx = 1") == ("r", "x")


def test_bug_class_body_reads_before_the_cell_binds_are_inputs():
    assert inputs("class A:\n    attr = v\nv = 1") == ("v",)


def test_bug_method_reading_a_class_attribute_name_is_an_input():
    assert inputs("class C:\n    k = 1\n    def m(self):\n        return k\n") == ("k",)


@pytest.mark.parametrize(
    "code",
    [
        "def f():\n    def g(a=q):\n        return a\n    return g\n",
        "def f():\n    return lambda a=q: a\n",
        "def f():\n    class C(q):\n        pass\n    return C\n",
    ],
)
def test_bug_nested_defaults_and_bases_are_reads(code):
    assert inputs(code) == ("q",)


def test_bug_parameter_annotations_are_reads():
    assert inputs("def f(a: T1, *, b: T2) -> R:\n    pass") == ("T1", "T2", "R")


def test_bug_global_in_nested_function_is_a_write():
    assert "H" in writes("def f():\n    def g():\n        global H\n        H = 1\n")


def test_bug_walrus_in_comprehension_binds_in_the_cell():
    assert io("vals = [y for x in xs if (y := g(x))]\nz = y") == (("xs", "g"), ("vals", "y", "z"))


def test_bug_bare_annotation_does_not_bind():
    assert io("x: T") == (("T",), ())
