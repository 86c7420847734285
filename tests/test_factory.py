"""FastLoader(...) picks one of three loaders from its arguments; each is a FastLoader."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import fastloader
from fastloader.loader.clips.audio import AudioLoader
from fastloader.loader.clips.video import VideoLoader
from fastloader.loader.dali.loader import DaliLoader
from fastloader.loader.dropin.loader import DropInLoader
from fastloader.loader.factory import base
from fastloader.loader.factory.audio_options import AudioOptions
from fastloader.loader.factory.option_paths import option_defaults, paths
from fastloader.loader.factory.options import DaliOptions, DropInOptions, PackedOptions
from fastloader.loader.factory.video_options import VideoOptions
from fastloader.loader.loader import FastLoader
from fastloader.loader.mix.loader import MixLoader
from fastloader.loader.packed import loader as packed
from fastloader.loader.packed.loader import PackedLoader
from tiny_dataset import Numbers
from treegen import make_flat_tree

CROP = [fastloader.CenterCrop(16)]


@pytest.fixture(scope="module")
def packed_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("factory")
    make_flat_tree(root / "src", classes=2, per_class=3)
    fastloader.pack(root / "src", root / "d.lmdb", workers=1)
    return root / "d.lmdb"


def test_packed_path_gives_the_packed_loader(packed_path: Path) -> None:
    with FastLoader(packed_path, batch_size=2, device="cpu", transforms=CROP) as loader:
        assert type(loader) is PackedLoader and isinstance(loader, fastloader.FastLoader)
        assert len(list(loader)) == 3
    dataset = fastloader.open_dataset(packed_path)
    with FastLoader(dataset, batch_size=2, device="cpu", transforms=CROP) as loader:
        assert type(loader) is PackedLoader
    dataset.close()


def test_torch_dataset_gives_the_dropin_loader() -> None:
    loader = FastLoader(Numbers(), batch_size=2, num_workers=0)
    assert type(loader) is DropInLoader and isinstance(loader, FastLoader)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3]]
    loader.close()


def test_dali_backend_gives_the_dali_loader(packed_path: Path) -> None:
    pytest.importorskip("nvidia.dali", reason="NVIDIA DALI is not installed (the [dali] extra)")
    with FastLoader(packed_path, batch_size=2, device="cpu", backend="dali",
                    transforms=CROP) as loader:
        assert type(loader) is DaliLoader and isinstance(loader, FastLoader)
        assert len(list(loader)) == 3


def test_unknown_backend_is_refused_before_any_loader_is_built(packed_path: Path) -> None:
    with pytest.raises(fastloader.InvalidArgumentError, match="backend"):
        FastLoader(packed_path, backend="opencv")


def test_the_packed_loader_knows_nothing_of_the_others() -> None:
    source = inspect.getsource(packed)
    for other in ("_delegate", "DropInLoader", "DaliLoader", "loader.dropin", "loader.dali"):
        assert other not in source


PACKED_ONLY_DEFAULTS = {"max_skips": None, "batch_transform": None, "verify_records": False,
                        "fields": None, "multi_hot": None, "padded": False,
                        "min_box_visibility": 0.25, "decode_images": True, "cache_dir": None,
                        "cache_limit": None, "storage_options": None, "shuffle_window": None,
                        "prefetch_shards": 2}


def test_one_set_of_arguments_serves_every_loader(packed_path: Path) -> None:
    """Packed-only arguments at their defaults are taken by the drop-in and DALI loaders too
    (not a DataLoader TypeError); another value is refused naming the argument."""
    loader = FastLoader(Numbers(), batch_size=2, num_workers=0, **PACKED_ONLY_DEFAULTS)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3]]
    loader.close()
    for name in PACKED_ONLY_DEFAULTS:
        only = r"packed loader(, the \w+ loader)*( and the \w+ loader)? only"  # DALI, audio, video
        with pytest.raises(fastloader.InvalidArgumentError, match=rf"{name}.*{only}"):
            FastLoader(Numbers(), batch_size=2, num_workers=0, **{name: 7})


def test_the_dali_loader_takes_packed_only_defaults(packed_path: Path) -> None:
    pytest.importorskip("nvidia.dali", reason="NVIDIA DALI is not installed (the [dali] extra)")
    with FastLoader(packed_path, batch_size=2, device="cpu", backend="dali", transforms=CROP,
                    **PACKED_ONLY_DEFAULTS) as loader:
        assert len(list(loader)) == 3
    with pytest.raises(fastloader.InvalidArgumentError, match=r"verify_records.*DALI loader"):
        FastLoader(packed_path, batch_size=2, device="cpu", backend="dali", transforms=CROP,
                   verify_records=True)


def own_parameters(loader: type) -> dict[str, inspect.Parameter]:
    """A loader's arguments by name, without `data` and the **kwargs it refuses or forwards."""
    return {name: p for name, p in inspect.signature(loader).parameters.items()
            if name != "data" and p.kind is not p.VAR_KEYWORD}


@pytest.mark.parametrize(("loader", "options"), [(PackedLoader, PackedOptions),
                                                 (DaliLoader, DaliOptions),
                                                 (DropInLoader, DropInOptions)])
def test_each_loader_takes_exactly_its_options(loader: type, options: type) -> None:
    """A loader's signature and its options class list the same names with the same
    defaults: the path lists read from the options describe what each loader takes."""
    given = {name: p.default for name, p in own_parameters(loader).items()}
    assert given == option_defaults(options)
    assert all(p.annotation is not p.empty for p in own_parameters(loader).values())


def test_the_signature_of_fastloader_lists_every_parameter() -> None:
    signature = inspect.signature(fastloader.FastLoader)
    parameters = signature.parameters
    assert not any(p.kind is p.VAR_POSITIONAL for p in parameters.values())
    assert list(parameters)[:3] == ["data", "batch_size", "shuffle"]
    assert parameters["dataloader_kwargs"].kind is inspect.Parameter.VAR_KEYWORD
    for loader in (PackedLoader, DaliLoader, DropInLoader, AudioLoader, VideoLoader):
        for name in own_parameters(loader):
            assert name in parameters, f"{loader.__name__}'s {name} is not in the signature"
            assert parameters[name].annotation is not inspect.Parameter.empty
    # FastLoader's defaults are the packed loader's (the path a dataset path takes).
    for name, default in option_defaults(PackedOptions).items():
        assert parameters[name].default == default, name
    assert parameters["roi_decode"].default is True
    audio_only = [n for n in option_defaults(AudioOptions) if n not in
                  option_defaults(PackedOptions)]
    assert audio_only == ["audio", "max_batch_seconds", "duration_buckets"]
    video_only = [n for n in option_defaults(VideoOptions) if n not in
                  option_defaults(PackedOptions)]
    assert video_only == ["video"]
    # data, roi, the audio loader's own, the video loader's own, **
    assert len(parameters) == (1 + len(option_defaults(PackedOptions)) + 2 + len(audio_only)
                               + len(video_only))


def test_each_loader_shows_its_own_signature() -> None:
    """A loader class's signature is its own __init__'s, not the factory's union."""
    assert "sampler" not in inspect.signature(DaliLoader).parameters
    assert "roi_decode" in inspect.signature(DaliLoader).parameters
    assert "roi_decode" not in inspect.signature(PackedLoader).parameters
    assert "transforms" not in inspect.signature(DropInLoader).parameters


def test_every_option_belongs_to_a_path() -> None:
    names = set(inspect.signature(fastloader.FastLoader).parameters) - {"data",
                                                                         "dataloader_kwargs"}
    assert names == set().union(*(option_defaults(o) for o in paths().values()))


def test_an_option_of_another_path_is_refused_naming_the_paths(packed_path: Path) -> None:
    with pytest.raises(fastloader.InvalidArgumentError,
                       match=r"roi_decode=False is invalid: applies to the DALI loader only, "
                             r"not to the packed path\. .*backend='dali'"):
        FastLoader(packed_path, device="cpu", transforms=CROP, roi_decode=False)
    with pytest.raises(fastloader.InvalidArgumentError,
                       match=r"transforms=.* applies to the packed loader, the DALI loader and "
                             r"the video loader only, not to the drop-in loader of a torch "
                             r"Dataset\. Apply"):
        FastLoader(Numbers(), transforms=CROP)
    # At FastLoader's default, an option of another path is taken and has no effect.
    with FastLoader(packed_path, device="cpu", transforms=CROP, roi_decode=True) as loader:
        assert type(loader) is PackedLoader
    loader = FastLoader(Numbers(), batch_size=2, num_workers=0, transforms=None, prefetch=2,
                        roi_decode=True)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3]]
    loader.close()


# -- the typed overloads (what mypy and editors read) against the options classes -----------

# FastLoader's overloads in order, by the path each types; the mixed loader's names its own
# arguments and passes the rest on as the packed loader's.
OVERLOAD_PATHS = ("packed loader", "DALI loader", "audio loader", "video loader",
                  "mixed loader", "drop-in loader")
# required: they choose the path
SELECTORS = {"DALI loader": "backend", "audio loader": "audio", "video loader": "video"}


def overloads() -> list[ast.FunctionDef]:
    """FastLoader.__new__'s @overload definitions, as written in loader/factory/base.py."""
    tree = ast.parse(inspect.getsource(base))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "FastLoader")
    return [f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__new__"
            and any(isinstance(d, ast.Name) and d.id == "overload" for d in f.decorator_list)]


def spelled(annotation: str) -> str:
    return ast.unparse(ast.parse(annotation, mode="eval"))


# The default of a keyword an overload unpacks from its path's TypedDict (typing.Unpack):
# optional there, its default the options class's.
UNPACKED = "unpacked"


def unpacked(function: ast.FunctionDef) -> type | None:
    """The TypedDict an overload's **kwargs unpacks (`**options: Unpack[PackedArgs]`), or None."""
    rest = function.args.kwarg
    annotation = rest.annotation if rest is not None else None
    if not (isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value) == "Unpack"):
        return None
    keywords: type = vars(base)[ast.unparse(annotation.slice)]
    return keywords


def overload_options(function: ast.FunctionDef) -> dict[str, tuple[str, str, object]]:
    """name -> (kind, annotation, default) of an overload's arguments after `data`: those it
    writes out, and the keywords it unpacks (each optional: UNPACKED)."""
    args = function.args
    positional = args.args[2:]  # not cls, data
    defaults = dict(zip([a.arg for a in positional], args.defaults[-len(positional):],
                        strict=True))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                     if d is not None})
    kinds = {a.arg: "positional" for a in positional} | {a.arg: "keyword"
                                                          for a in args.kwonlyargs}
    namespace = vars(base)
    written: dict[str, tuple[str, str, object]] = {
        a.arg: (kinds[a.arg], spelled(ast.unparse(a.annotation)),  # type: ignore[arg-type]
                eval(ast.unparse(defaults[a.arg]), namespace) if a.arg in defaults
                else "required")
        for a in positional + args.kwonlyargs}
    keywords = unpacked(function)
    if keywords is not None:
        assert not keywords.__required_keys__, f"{keywords.__name__}: every key optional"
        for name, annotation in keywords.__annotations__.items():
            assert name not in written, f"{name} is written out and unpacked"
            written[name] = ("keyword", spelled(getattr(annotation, "__forward_arg__",
                                                        annotation)), UNPACKED)
    return written


def class_options(options: type) -> dict[str, tuple[str, str, object]]:
    """The same, read from an options class: its fields, their types and defaults."""
    annotations: dict[str, str] = {}
    for owner in reversed(options.__mro__):
        annotations.update(inspect.get_annotations(owner))
    return {name: ("positional" if name in ("batch_size", "shuffle") else "keyword",
                   spelled(annotations[name]), default)
            for name, default in option_defaults(options).items()}


def test_fastloader_has_an_overload_per_path() -> None:
    assert len(overloads()) == len(OVERLOAD_PATHS)
    assert set(OVERLOAD_PATHS) == set(paths()) | {"mixed loader"}


@pytest.mark.parametrize("path", [p for p in OVERLOAD_PATHS if p in paths()])
def test_each_overload_types_exactly_its_path_options(path: str) -> None:
    """An option added to (or changed in) an options class and not to FastLoader's overload
    of that path, or the other way round, fails here: the overloads are what mypy checks a
    call against, the classes what the loaders take."""
    written = overload_options(overloads()[OVERLOAD_PATHS.index(path)])
    declared = class_options(paths()[path])
    selector = SELECTORS.get(path)
    if selector is not None:  # the argument that chooses the path has no default there
        assert written.pop(selector)[2] == "required"
        declared.pop(selector)
    assert {n: w[:2] for n, w in written.items()} == {n: d[:2] for n, d in declared.items()}
    assert {n: w[2] for n, w in written.items() if w[2] != UNPACKED} == {
        n: declared[n][2] for n, w in written.items() if w[2] != UNPACKED}


def test_the_mix_overload_names_the_mixed_loaders_own_arguments() -> None:
    mix = overloads()[OVERLOAD_PATHS.index("mixed loader")]
    written = {n for n, w in overload_options(mix).items() if w[2] != UNPACKED}
    own = {n for n, p in inspect.signature(MixLoader).parameters.items()
           if p.kind is p.KEYWORD_ONLY}
    assert written - {"batch_size", "shuffle"} == own
    # the rest, as MixLoader passes them on: every packed loader option
    assert unpacked(mix) is unpacked(overloads()[OVERLOAD_PATHS.index("packed loader")])


def test_each_loader_signature_is_its_options_in_order() -> None:
    """A loader's signature (inspect, the docs) lists its options class's fields, batch_size
    and shuffle positional after data, typed as the class types them."""
    for path, options in paths().items():
        loader = FastLoader._loader_of(path)
        parameters = inspect.signature(loader).parameters
        assert list(parameters)[:3] == ["data", "batch_size", "shuffle"]
        assert {n: ("positional" if p.kind is p.POSITIONAL_OR_KEYWORD else "keyword",
                    spelled(p.annotation), p.default)
                for n, p in own_parameters(loader).items()} == class_options(options)


def test_a_loader_binds_its_arguments_as_its_signature_says(packed_path: Path) -> None:
    """Positional batch_size and shuffle reach the options; a surplus positional argument or
    one given twice is Python's own TypeError, before anything is opened."""
    with PackedLoader(packed_path, 2, True, device="cpu", transforms=CROP) as loader:
        assert loader.batch_size == 2 and loader.sampler.shuffle
    with pytest.raises(TypeError, match="positional"):
        PackedLoader(packed_path, 2, True, 0)
    with pytest.raises(TypeError, match="multiple values"):
        PackedLoader(packed_path, 2, batch_size=3)


def test_audio_arguments_given_to_a_map_style_dataset_speak_of_clips() -> None:
    """audio= on a torch Dataset (the drop-in loader) says to pack the audio dataset, not the
    images (issue 38 item 9), and so do the audio loader's other options on the packed path."""
    with pytest.raises(fastloader.InvalidArgumentError) as refusal:
        FastLoader(Numbers(), audio=fastloader.Audio())
    message = str(refusal.value)
    assert "audio loader only, not to the drop-in loader" in message
    assert "pack the audio dataset with `packdata`" in message
    assert "audio=fastloader.Audio(...)" in message and "images" not in message
    with pytest.raises(fastloader.InvalidArgumentError,
                       match=r"max_batch_seconds=2.0 .*audio loader only, not to the packed "
                             r"path\. Drop it, or pass audio=fastloader\.Audio\(\.\.\.\)"):
        FastLoader("unused.lmdb", max_batch_seconds=2.0)


def test_fastloader_types_each_argument_as_its_widest_declaration() -> None:
    """FastLoader's own signature (derived from the classes) types an argument the paths
    narrow as the base class declares it: batch_size may be None (drop-in), backend is any
    backend, prefetch may be "auto"."""
    parameters = inspect.signature(fastloader.FastLoader).parameters
    assert spelled(parameters["batch_size"].annotation) == "int | None"
    assert spelled(parameters["backend"].annotation) == \
        "Literal['auto', 'native', 'pillow', 'dali']"
    assert spelled(parameters["prefetch"].annotation) == "int | Literal['auto']"
    assert parameters["roi_decode"].annotation == "bool"
    assert inspect.signature(fastloader.FastLoader).return_annotation == "FastLoader"
