"""Registry and loader: built-ins, user folders, broken files, duplicates, no top-level packages."""

from __future__ import annotations

import json
import subprocess
import sys
import os
from pathlib import Path

import pytest

from kbench import loader
from kbench.errors import UserError
from kbench.registry import (Implementation, Needs, Registry, Unsupported, collecting, implementation,
                             parse_param_args, skip_reason, suite, variants)
from kbench.suite import Case, Suite

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BUILTIN_ATTENTION = {"naive", "sdpa", "sdpa-cudnn", "sdpa-efficient", "sdpa-math", "triton-fa2", "cupy-fa2", "cuda-fa3", "gluon-fa3",
                     "fa4", "flashinfer"}


def _impl(name="x", suite_name="toy", params=None, **needs) -> Implementation:
    return Implementation(suite=suite_name, name=name, backend="torch", make=lambda c, i, o, **p: (lambda: None),
                          needs=Needs(**needs), description="", source="test", params=dict(params or {}))


# --- built-ins -------------------------------------------------------------

def test_builtins_load_without_errors(registry):
    assert registry.load_errors == {}
    assert {"attention", "matmul"} <= set(registry.suites)
    assert set(registry.implementations("attention")) == BUILTIN_ATTENTION
    assert registry.implementations("attention")["cupy-fa2"].params == {
        "block_m": 128, "block_n": 64, "warps": 4, "smem_layout": "swizzle", "lse": 0, "rescale": 8,
        "loads": "auto", "order": "auto"}
    for suite_name in registry.suites:
        for impl in registry.implementations(suite_name).values():
            assert Path(impl.source).parent == loader.BUILTIN_KERNELS / suite_name


def test_builtin_attributes(registry):
    impls = registry.implementations("attention")
    assert impls["triton-fa2"].backend == "triton"
    assert "triton" in impls["triton-fa2"].needs.modules
    assert impls["sdpa-cudnn"].needs.cuda and impls["sdpa-efficient"].needs.cuda
    assert not impls["naive"].needs.cuda and not impls["sdpa-math"].needs.cuda
    assert impls["naive"].description.startswith("three kernels")
    assert registry.suite("attention").baseline == "naive"


def test_suites_only_load_has_no_kernels():
    reg = loader.load(with_kernels=False)
    assert "attention" in reg.suites
    assert reg.impls["attention"] == {}


def test_registries_share_the_suites_loaded_once_and_nothing_else(write_kernels):
    """Every registry holds the same suite objects (their files ran once) but impls and errors of its own:
    a kernel folder given to one run is not in the next one's registry."""
    folder = write_kernels({"mine.py": """
        @implementation("attention", "mine-only-here", backend="torch")
        def mine(case, inputs, out):
            return _correct(case, inputs, out)
    """})
    with_folder, plain = loader.load([folder]), loader.load()
    assert with_folder.suites["attention"] is plain.suites["attention"] is loader.builtin_suites()["attention"]
    assert "mine-only-here" in with_folder.implementations("attention")
    assert "mine-only-here" not in plain.implementations("attention")
    loader.builtin_suites().clear()  # a copy: the loaded suites stay
    assert "attention" in loader.load(with_kernels=False).suites


def test_a_run_executes_each_suite_file_once(proc_env, tmp_path):
    """`kbench run` builds run's, explain's and profile's options from the suites, then runs with them:
    in the parent process every suite file is executed once before the run starts, not once per use."""
    script = (
        "import json, sys\n"
        "from kbench import loader, runner\n"
        "executed = []\n"
        "real = loader.load_file\n"
        "def counting(path, registry):\n"
        "    if loader.BUILTIN_SUITES in path.parents:\n"
        "        executed.append(str(path))\n"
        "    return real(path, registry)\n"
        "loader.load_file = counting\n"
        "def started(*args, **kwargs):\n"
        "    print(json.dumps(executed))\n"
        "    sys.exit(0)\n"
        "runner.run = started\n"
        "from kbench.cli import app\n"
        "app(['run', 'attention', '--n', '256', '--d', '128', '--impl', 'naive', '--out', sys.argv[1]],\n"
        "    prog_name='kbench')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "r.jsonl")], cwd=tmp_path, env=proc_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    executed = json.loads(proc.stdout.splitlines()[-1])
    assert sorted(executed) == sorted(str(path) for path in loader.suite_files(loader.BUILTIN_SUITES))
    assert len(executed) == 10  # each suite's definition once; helpers beside them load through load_helper


def test_python_files_skips_private_and_hidden():
    names = sorted(p.relative_to(FIXTURES / "broken").as_posix() for p in loader.python_files(FIXTURES / "broken"))
    assert names == ["duplicate_name.py", "exits_at_import.py", "good_kernel.py", "import_error.py",
                     "os_exit_at_import.py", "syntax_error.py"]


# --- user folders ----------------------------------------------------------

def test_user_folder_registers_new_implementation(write_kernels):
    folder = write_kernels({"mine.py": """
        @implementation("attention", "mine", backend="torch", description="user's")
        def mine(case, inputs, out):
            return _correct(case, inputs, out)
    """})
    reg = loader.load([folder])
    assert reg.load_errors == {}
    impls = reg.implementations("attention")
    assert set(impls) == BUILTIN_ATTENTION | {"mine"}
    assert impls["mine"].source == str((folder / "mine.py").resolve())
    assert impls["mine"].description == "user's"


def test_a_named_only_implementation_runs_only_when_named(write_kernels):
    folder = write_kernels({"mine.py": """
        @implementation("attention", "mine", backend="torch", named_only=True)
        def mine(case, inputs, out):
            return _correct(case, inputs, out)
    """})
    reg = loader.load([folder])
    assert reg.load_errors == {} and "mine" in reg.implementations("attention")
    assert {i.name for i in reg.select("attention", None)} == BUILTIN_ATTENTION
    assert [i.name for i in reg.select("attention", ["mine", "naive"])] == ["mine", "naive"]


def test_user_folder_in_subfolders_and_docstring_description(write_kernels):
    folder = write_kernels({"deep/er/k.py": '''
        @implementation("attention", "deep", backend="torch")
        def deep(case, inputs, out):
            """First docstring line is the description.

            Not this one."""
            return _correct(case, inputs, out)
    '''}, folder="nested")
    reg = loader.load([folder])
    assert reg.implementations("attention")["deep"].description == "First docstring line is the description."


def test_kbench_kernels_environment_variable(write_kernels, monkeypatch, tmp_path):
    a = write_kernels({"a.py": """
        @implementation("attention", "env-a", backend="torch")
        def a(case, inputs, out):
            return _correct(case, inputs, out)
    """}, folder="a")
    b = write_kernels({"b.py": """
        @implementation("attention", "env-b", backend="torch")
        def b(case, inputs, out):
            return _correct(case, inputs, out)
    """}, folder="b")
    monkeypatch.setenv("KBENCH_KERNELS", f"{a}:{b}")
    reg = loader.load()
    assert {"env-a", "env-b"} <= set(reg.implementations("attention"))


def test_missing_folder_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        loader.load([tmp_path / "nope"])


def test_broken_files_are_reported_and_do_not_hide_others():
    reg = loader.load([FIXTURES / "broken"])
    broken = FIXTURES / "broken"
    errors = {Path(path).name: message for path, message in reg.load_errors.items()}
    assert set(errors) == {"syntax_error.py", "import_error.py", "duplicate_name.py", "exits_at_import.py",
                           "os_exit_at_import.py"}
    assert errors["exits_at_import.py"] == "it ends the process when imported (sys.exit(2))"
    assert errors["os_exit_at_import.py"] == "it ends the process when imported (os._exit(3))"
    assert os._exit is not None and os._exit.__module__ == "posix"  # given back once loading is done
    assert errors["syntax_error.py"].startswith("SyntaxError")
    assert "kbench_no_such_module_xyz" in errors["import_error.py"]
    assert "ModuleNotFoundError" in errors["import_error.py"]
    assert "attention/naive is defined twice" in errors["duplicate_name.py"]
    impls = reg.implementations("attention")
    assert "fixture-good" in impls  # the good file beside the broken ones
    assert BUILTIN_ATTENTION <= set(impls)  # and every built-in
    assert "fixture-syntax" not in impls
    # the duplicate did not replace the built-in
    assert Path(impls["naive"].source).parent == loader.BUILTIN_KERNELS / "attention"
    assert all(str(broken.resolve()) in path for path in reg.load_errors)


def test_list_reports_broken_files_as_warnings(cli, flat_text):
    result = cli("list", "--kernels", FIXTURES / "broken")
    assert result.exit_code == 0, result.output
    err = flat_text(result.stderr)
    assert err.count("warning: could not load") == 5
    assert "syntax_error.py: SyntaxError" in err
    assert "fixture-good" in flat_text(result.stdout)
    assert "Traceback" not in result.output


# --- registration rules ------------------------------------------------------

def test_same_implementation_twice_raises():
    reg = Registry()
    reg.add_impl(_impl("dup"))
    with pytest.raises(ValueError, match="toy/dup is defined twice"):
        reg.add_impl(_impl("dup"))


def test_same_name_twice_through_decorator_raises():
    reg = Registry()
    with collecting(reg, "here.py"):
        implementation("toy", "twice", backend="torch")(lambda c, i, o: None)
        with pytest.raises(ValueError, match="defined twice"):
            implementation("toy", "twice", backend="torch")(lambda c, i, o: None)
    assert list(reg.impls["toy"]) == ["twice"]


def test_same_suite_twice_raises():
    class Toy(Suite):
        name = "toy"

    reg = Registry()
    with collecting(reg, "toy.py"):
        suite(Toy)
        with pytest.raises(ValueError, match="suite 'toy' is defined twice"):
            suite(Toy)


def test_same_file_loaded_twice_reports_duplicates(write_kernels):
    folder = write_kernels({"once.py": """
        @implementation("attention", "once", backend="torch")
        def once(case, inputs, out):
            return _correct(case, inputs, out)
    """})
    reg = loader.load([folder, folder])
    assert "once" in reg.implementations("attention")
    assert any("attention/once is defined twice" in m for m in reg.load_errors.values())


def test_registration_outside_loader_raises():
    with pytest.raises(RuntimeError, match="while kbench.loader loads a file"):
        implementation("attention", "loose", backend="torch")(lambda c, i, o: None)


def test_decorator_records_needs_and_source():
    reg = Registry()
    with collecting(reg, "/some/file.py"):
        implementation("toy", "n", backend="cupy", cuda=True, modules=("torch", "cupy"), min_cc=(9, 0),
                       dtypes=("fp16",), description="d")(lambda c, i, o: None)
    impl = reg.impls["toy"]["n"]
    assert impl.source == "/some/file.py"
    assert impl.needs == Needs(cuda=True, modules=("torch", "cupy"), min_cc=(9, 0), dtypes=("fp16",))
    assert impl.needs.describe() == "CUDA, cupy, sm_90+, fp16"
    assert Needs().describe() == "CPU or CUDA"


# --- look-ups ----------------------------------------------------------------

def test_unknown_suite_lookup_suggests(registry):
    with pytest.raises(UserError, match="unknown suite 'attenton'; did you mean 'attention'"):
        registry.suite("attenton")
    with pytest.raises(UserError, match="unknown suite 'qqq'$"):
        registry.implementations("qqq")


def test_select_order_and_unknown(registry):
    chosen = registry.select("attention", ["triton-fa2", "naive"])
    assert [i.name for i in chosen] == ["triton-fa2", "naive"]
    assert {i.name for i in registry.select("attention", None)} == BUILTIN_ATTENTION
    with pytest.raises(UserError, match=r"unknown implementation 'tritonfa2'.*did you mean 'triton-fa2'\?"):
        registry.select("attention", ["naive", "tritonfa2"])


# --- skip reasons -------------------------------------------------------------

def test_skip_reasons():
    case = Case({"n": 8, "dtype": "fp32"})
    assert skip_reason(_impl(), case, "cpu") is None
    assert skip_reason(_impl(cuda=True), case, "cpu") == "needs a CUDA device"
    assert skip_reason(_impl(cuda=True), case, "cuda") is None
    assert skip_reason(_impl(modules=("torch", "kbench_no_such_mod")), case, "cpu") == \
        "needs kbench_no_such_mod (not installed)"
    # a submodule of a package that is not installed (fa4's flash_attn.cute on a GPU without flash_attn)
    assert skip_reason(_impl(cuda=True, modules=("kbench_no_such_pkg.cute",)), case, "cuda") == \
        "needs kbench_no_such_pkg.cute (not installed)"
    assert skip_reason(_impl(min_cc=(9, 0)), case, "cuda", (8, 0)) == \
        "needs compute capability 9.0+ (this GPU is 8.0)"
    assert skip_reason(_impl(min_cc=(9, 0)), case, "cuda", (9, 0)) is None
    assert skip_reason(_impl(min_cc=(9, 0)), case, "cuda", None) is None
    assert skip_reason(_impl(dtypes=("fp16", "bf16")), case, "cpu") == "fp32 not supported (supports fp16, bf16)"
    assert skip_reason(_impl(supports=lambda c: "too big" if c.n > 4 else None), case, "cpu") == "too big"


def test_triton_fa2_skips_non_power_of_two_head_dim(registry):
    impl = registry.implementations("attention")["triton-fa2"]
    case = Case({"n": 8, "d": 24, "batch": 1, "heads": 1, "dtype": "fp16", "causal": False})
    assert skip_reason(impl, case, "cpu") == "head dim 24 is not a power of two from 16 to 256"
    assert skip_reason(impl, Case({**case.values, "d": 32}), "cpu") is None


def test_unsupported_is_an_exception():
    assert issubclass(Unsupported, Exception)


# --- no top-level packages -----------------------------------------------------

@pytest.mark.parametrize("package", ["kernels", "suites"])
def test_kernels_and_suites_are_not_top_level_packages(package, tmp_path, proc_env):
    script = (
        "import kbench.loader\n"  # kbench itself is importable from anywhere...
        "try:\n"
        f"    import {package}\n"
        "except ImportError:\n"
        "    print('ImportError')\n"
        "else:\n"
        f"    print('imported', {package}.__path__)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=proc_env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ImportError"


def test_loaded_modules_use_private_names(registry):
    names = [m for m in sys.modules if m.startswith("kbench_loaded.")]
    assert any(m.startswith("kbench_loaded.triton_fa2_") for m in names)
    assert "kernels" not in sys.modules and "suites" not in sys.modules


# --- implementation parameters (--param) ----------------------------------------------

def test_parse_param_args():
    assert parse_param_args(["block_m=64,128", "warps = 4", "block-n=32"]) == {
        "block_m": ["64", "128"], "warps": ["4"], "block_n": ["32"]}
    for bad in ("block_m", "=4", "block_m=", "block_m=,"):
        with pytest.raises(UserError, match="expected NAME=VALUE"):
            parse_param_args([bad])


def test_variants_product_labels_and_types():
    tiled = _impl("tiled", params={"block": 64, "warps": 4, "scale": 1.0})
    plain = _impl("plain")
    out = variants([plain, tiled], {"block": ["32", "128"], "scale": ["0.5"]})
    assert [v.label for v in out] == ["plain", "tiled[block=32,scale=0.5]", "tiled[block=128,scale=0.5]"]
    assert out[1].params == {"block": 32, "warps": 4, "scale": 0.5}
    assert type(out[1].params["block"]) is int and type(out[1].params["scale"]) is float
    assert out[0].params == {}
    assert [v.label for v in variants([tiled], {})] == ["tiled"]
    assert variants([tiled], {})[0].params == {"block": 64, "warps": 4, "scale": 1.0}


def test_a_default_value_given_names_the_same_variant():
    """`--param warps=4` where 4 is the default is the run without it: the same label, so compare and
    --resume match the two; only the values away from the defaults name a variant."""
    tiled = _impl("tiled", params={"block": 64, "warps": 4, "mode": "auto"})
    out = variants([tiled], {"warps": ["4", "8"], "mode": ["auto"]})
    assert [v.label for v in out] == ["tiled", "tiled[warps=8]"]
    assert out[0].params == {"block": 64, "warps": 4, "mode": "auto"}
    assert [v.label for v in variants([tiled], {"block": ["32"], "mode": ["auto", "0"]})] == [
        "tiled[block=32]", "tiled[block=32,mode=0]"]


def test_variants_errors():
    tiled = _impl("tiled", params={"block": 64})
    with pytest.raises(UserError, match=r"no chosen implementation has a parameter 'warps' \(tiled takes block\)"):
        variants([tiled], {"warps": ["4"]})
    with pytest.raises(UserError, match=r"--param block \(for tiled\): 'abc' is not an integer"):
        variants([tiled], {"block": ["abc"]})


def test_a_choice_list_of_a_word_and_numbers_takes_either():
    """warps=auto|2|4|8: the default is the word, the other choices numbers; `--param warps=4` is the
    number 4 (what the kernel builds with), `auto` the word, and a number not listed is refused."""
    impl = _impl("warped", params={"warps": "auto"})
    impl.allowed["warps"] = ("auto", 2, 4, 8)
    out = variants([impl], {"warps": ["auto", "4"]})
    assert [v.params["warps"] for v in out] == ["auto", 4] and [v.label for v in out] == ["warped", "warped[warps=4]"]
    with pytest.raises(UserError, match=r"--param warps \(for warped\): '3' is not one of auto, 2, 4, 8"):
        variants([impl], {"warps": ["3"]})


def test_boolean_parameter_values_parse_as_booleans():
    """A parameter whose default is a bool is converted with bool(text): bool("false") and bool("0")
    are True, so `--param flag=false` silently runs the True variant (labelled flag=True)."""
    impl = _impl("flagged", params={"flag": True})
    for falsy in ("false", "0", "off", "no"):
        out = variants([impl], {"flag": [falsy, "true"]})
        assert [v.params["flag"] for v in out] == [False, True]


def test_a_workers_registry_loads_only_its_suites_built_in_kernels():
    """A worker runs one suite's jobs: it loads kernels/SUITE/ (and the user's folders), not every suite."""
    from kbench import loader

    only = loader.load([], suite="reduction")
    assert set(only.implementations("reduction")) == set(loader.load([]).implementations("reduction"))
    assert not only.implementations("attention") and not only.implementations("matmul")
    outside = loader.load([], suite="a-suite-without-a-kernel-folder")  # a $KBENCH_SUITES suite: all of them
    assert outside.implementations("attention")
