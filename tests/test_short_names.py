"""Long kernel names in terminal tables: shortened to what identifies them, whole in --json."""

import json

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
