"""Long kernel names in terminal tables: shortened to what identifies them, whole in --json."""

import json
import re

from rnnprof.cli import main
from rnnprof.reports.layout import short_name

from fixtures import FIXTURES

DGRAD = ("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, float const*, int, "
         "float const*, int, float*, kernel_grad_params, unsigned long long, int, unsigned long long, int, float)")


def test_a_demangled_signature_keeps_its_qualified_name():
    assert short_name(DGRAD) == "cudnn::detail::dgrad_engine<…>(…)"
    assert short_name("at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
                      "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)") == (
        "at::native::vectorized_elementwise_kernel<…>(…)")


def test_short_names_are_left_alone_and_long_plain_names_keep_head_and_tail():
    assert short_name("aten::view") == "aten::view"
    # a bracket that does not close is no template or argument list: kept, not folded away
    assert short_name("aten::lt (a < b)") == "aten::lt (…)" and short_name("x < y") == "x < y"
    name = "cudnn_train_volta_scudnn_128x128_stridedB_splitK_medium_nn_v1"
    shortened = short_name(name, 40)
    assert len(shortened) == 40 and shortened.startswith(name[:26]) and shortened.endswith(name[-13:])


def test_critical_path_prints_short_names_and_json_keeps_them_whole(capsys):
    path = str(FIXTURES / "kineto-1gpu-v100.json.gz")
    assert main(["critical-path", path, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    names = {link["name"] for step in document["steps"] for link in step["links"]}
    assert any(n.startswith("void cudnn::detail::dgrad_engine<float, 512") for n in names)
    assert main(["critical-path", path]) == 0
    text = capsys.readouterr().out
    assert "cudnn::detail::dgrad" in text and "kernel_grad_params" not in text


def test_names_that_differ_still_read_differently_when_cut():
    from rnnprof.reports.layout import distinct_names

    add = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
           "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)")
    fill1 = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
             "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)")
    fill2 = fill1.replace("Array<char*, 1> >", "Array<char*, 2> >", 1)
    for limit in (24, 40, 60):
        cut = distinct_names([add, fill1, fill2, "aten::mm"], limit)
        assert len(set(cut)) == 4 and all(len(c) <= limit for c in cut), cut
        assert cut[3] == "aten::mm"
        assert not any(re.search(r"\d…|…\d", c) for c in cut), cut  # never a number cut short
    cut = distinct_names([add, fill1], 40)
    assert "CUDAFunctor_add" in cut[0] and "FillFunctor" in cut[1]
    # one name alone keeps the usual short form
    assert distinct_names([DGRAD], 60) == [short_name(DGRAD, 60)]


def _kernel_rows(text: str, title: str) -> list[str]:
    """The first column of the table under ``title`` in a command's output at 200 columns."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rule = next(i for i in range(start, len(lines)) if set(lines[i].strip()) == {"─"})
    rows = []
    for line in lines[rule + 1:]:
        if not line.strip() or line.startswith("top "):  # the caption
            break
        rows.append(re.split(r"\s{2,}", line.strip())[0])
    return rows


def test_count_ops_kernel_rows_stay_distinct():
    """Kineto's V100 trace has two vectorized_elementwise_kernel instantiations and two cudnn bn_bw kernels among
    its ten kernels with the most time: each row still reads as its own kernel."""
    from rich.console import Console

    console = Console(width=200, record=True, color_system=None)
    assert main(["count-ops", str(FIXTURES / "kineto-1gpu-v100.json.gz")], console=console) == 0
    rows = _kernel_rows(console.export_text(), "kernel launches")
    assert len(rows) == 10
    assert sum("vectorized_e" in r for r in rows) == 2 and sum("bn_bw_1C11" in r for r in rows) == 2
    assert len(set(rows)) == len(rows), rows
