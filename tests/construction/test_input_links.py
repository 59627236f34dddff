"""A folder someone hands you stays a folder (issue 35, item 1): a symbolic link that leaves it
(``evil.html -> /etc/passwd``, an asset ``img.png -> /etc/passwd``, a linked folder) is refused in
one line naming it, or left out and reported (``folder.links=skip``), and never read; the renderer
reads only files inside the document's own folder; a hidden ``..html`` is named, not skipped in
silence. The folder scan and the renderer's guard are checked here in process; one slow test builds
such a folder with Chromium and greps everything the build wrote."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from helpers import build_app as build
from vldocir.construction.ingest import load_documents
from vldocir.construction.input_folder import folder_documents, outside_links
from vldocir.construction.render.browser import file_allowed
from vldocir.construction.render.config import RenderError
from vldocir.construction.render.renderer import document_path
from vldocir.errors import ConfigError

SECRET = "root:x:0:0:planted-secret"


@pytest.fixture
def secret(tmp_path) -> Path:
    """A file outside the documents folder that nothing may read."""
    path = tmp_path / "outside" / "passwd"
    path.parent.mkdir()
    path.write_text(SECRET + "\n")
    return path


@pytest.fixture
def opened(monkeypatch) -> list[str]:
    """Every file opened for reading through ``open``/``Path.read_*``, recorded."""
    seen: list[str] = []
    real_open, read_bytes, read_text = open, Path.read_bytes, Path.read_text
    monkeypatch.setattr("builtins.open", lambda file, *a, **k: seen.append(str(file)) or real_open(file, *a, **k))
    monkeypatch.setattr(Path, "read_bytes", lambda self: seen.append(str(self)) or read_bytes(self))
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: seen.append(str(self)) or read_text(self, *a, **k))
    return seen


def documents_folder(root: Path, secret: Path) -> Path:
    """A real document, a link to the secret as a document, as an asset, and as a folder."""
    root.mkdir()
    (root / "real.html").write_text("<title>Real</title><p>a real document</p>")
    (root / "evil.html").symlink_to(secret)
    (root / "pics").mkdir()
    (root / "pics" / "img.png").symlink_to(secret)
    (root / "linked").symlink_to(secret.parent, target_is_directory=True)
    (root / "alias.html").symlink_to("real.html")  # stays inside: followed
    return root


def test_a_link_leaving_the_folder_is_refused_in_one_line_naming_it_and_not_read(tmp_path, secret, opened):
    folder = documents_folder(tmp_path / "d", secret)
    with pytest.raises(ConfigError) as error:
        load_documents(folder, "arxiv")
    message = str(error.value)
    assert message.startswith(f"input={folder}: {folder / 'evil.html'} is a symbolic link to {secret}, outside")
    assert "(3 such links)" in message and "folder.links=skip" in message and "\n" not in message
    assert SECRET not in message
    assert not any(str(secret) in path or "evil" in path for path in opened), opened
    found = {(str(link.relative_to(folder)), target) for link, target in outside_links(folder)}
    assert found == {("evil.html", str(secret)), ("pics/img.png", str(secret)), ("linked", str(secret.parent))}


def test_links_are_left_out_and_reported_with_links_skip(tmp_path, secret, opened, caplog):
    folder = documents_folder(tmp_path / "d", secret)
    (secret.parent / "index.html").write_text("<title>" + SECRET + "</title>")  # the linked folder is a document
    caplog.set_level(logging.INFO)
    _, docs = load_documents(folder, "arxiv", links="skip")
    by_id = {d.record.doc_id: d for d in docs}
    assert sorted(by_id) == ["alias", "evil", "linked", "real"]
    assert by_id["real"].problem is None and by_id["real"].record.title == "Real"
    assert by_id["alias"].problem is None  # a link inside the folder is followed
    for doc_id in ("evil", "linked"):  # left out (failed_documents), titles never read
        assert "is a symbolic link to" in by_id[doc_id].problem and "not read" in by_id[doc_id].problem
        assert by_id[doc_id].record.title == doc_id
    assert not any(str(secret.parent) in path or "evil" in path or "linked" in path for path in opened), opened
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("pics/img.png -> " + str(secret) in w for w in warning), warning  # the asset, named
    assert SECRET not in caplog.text


def test_a_linked_source_folder_and_a_linked_single_file(tmp_path, secret):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "a.html").write_text("<p>a</p>")
    (secret.parent / "x.html").write_text(SECRET)
    (folder / "sec").symlink_to(secret.parent, target_is_directory=True)
    with pytest.raises(ConfigError, match=r"sec is a symbolic link to .*outside the input folder"):
        folder_documents(folder, "arxiv")
    assert [d.record.doc_id for d in folder_documents(folder, "arxiv", links="skip")] == ["a"]
    (folder / "one.html").symlink_to(secret)
    with pytest.raises(ConfigError, match=r"one\.html is a symbolic link to .*passwd, outside the input folder"):
        folder_documents(folder / "one.html", "arxiv")
    [doc] = folder_documents(folder / "one.html", "arxiv", links="skip")
    assert doc.problem and "not read" in doc.problem
    with pytest.raises(ConfigError, match=r"folder\.links='follow': must be one of refuse, skip"):
        folder_documents(folder, "arxiv", links="follow")


def test_an_index_whose_document_is_a_link_leaving_its_folder(tmp_path, secret):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "evil.html").symlink_to(secret)
    (folder / "index.jsonl").write_text(json.dumps({"doc_id": "evil", "source": "arxiv", "path": "evil.html"}) + "\n")
    with pytest.raises(ConfigError, match=r"evil's .*evil\.html is a symbolic link to .*passwd, outside its folder"):
        load_documents(folder)
    _, [doc] = load_documents(folder, links="skip")
    assert "left out, not read" in doc.problem
    (folder / "index.jsonl").unlink()
    (folder / "index.jsonl").symlink_to(secret)  # the index itself
    with pytest.raises(ConfigError, match=r"index\.jsonl: a symbolic link to .*passwd, outside its folder; it is not"):
        load_documents(folder, links="skip")


def test_a_hidden_document_is_named_not_skipped_in_silence(tmp_path, caplog):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "a.html").write_text("<p>a</p>")
    (folder / "..html").write_text("<p>dots</p>")
    (folder / ".DS_Store").write_bytes(b"\0")  # not a document: no word
    caplog.set_level(logging.WARNING)
    assert [d.record.doc_id for d in folder_documents(folder, "arxiv")] == ["a"]
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "['..html']" in warning and "rename" in warning and ".DS_Store" not in warning


def test_the_renderer_reads_only_files_inside_the_documents_folder(tmp_path, secret):
    root = tmp_path / "doc"
    root.mkdir()
    (root / "index.html").write_text("<p>x</p>")
    (root / "img.png").symlink_to(secret)
    (root / "fig.png").write_bytes(b"png")
    (root / "sub").mkdir()
    real = root.resolve()
    assert file_allowed((root / "fig.png").as_uri(), real)
    assert file_allowed((root / "sub" / "missing.png").as_uri(), real)  # inside: allowed, simply missing
    for url in (
        secret.as_uri(),  # <img src>, <iframe src>, a navigation
        "file:///etc/passwd",
        (root / "img.png").as_uri(),  # a link inside the folder that leads out of it
        (root / "sub").as_uri() + "/../../outside/passwd",
        (root / "sub").as_uri() + "/%2e%2e/%2e%2e/outside/passwd",
        "file://otherhost" + str(root / "fig.png"),
        "http://example.com/x.png",
        "data:text/plain,x",
    ):
        assert not file_allowed(url, real), url
    assert not file_allowed((root / "fig.png").as_uri(), None)
    # the document itself: a link leading out of its folder is never loaded
    (root / "evil.html").symlink_to(secret)
    with pytest.raises(RenderError, match=r"evil\.html is a symbolic link to .*passwd, outside the document's folder"):
        document_path("evil", root / "evil.html")
    (root / "alias.html").symlink_to("index.html")
    assert document_path("doc", root / "alias.html") == real / "alias.html"
    assert document_path("doc", root / "index.html") == real / "index.html"
    with pytest.raises(RenderError, match="no such file"):
        document_path("doc", root / "gone.html")


def files_holding(text: str, *folders: Path) -> list[str]:
    return [
        str(path)
        for folder in folders
        if folder.exists()
        for path in folder.rglob("*")
        if path.is_file() and not path.is_symlink() and text.encode() in path.read_bytes()
    ]


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("chromium") is None or shutil.which("tesseract") is None,
    reason="needs Chromium and Tesseract (scripts/setup.sh installs both)",
)
def test_a_build_of_a_folder_with_links_out_reads_none_of_them(tmp_path, secret):
    """The issue's case (``ln -s /etc/passwd d/evil.html`` beside a real document), then the same
    folder left-out-and-reported, with an asset link and ``file://`` references to the file in the
    real document: ``root:x:0`` is in nothing the build wrote (tables, cache, logs)."""
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "real").mkdir()
    (folder / "real" / "index.html").write_text(
        "<html><body><h1>Real document</h1><p>The mill ground 97 tonnes of rye.</p>"
        '<img src="img.png" alt="asset link"><img src="file:///etc/passwd" alt="absolute">'
        f'<iframe src="file:///etc/passwd"></iframe><iframe src="{secret.as_uri()}"></iframe>'
        f'<object data="{secret.as_uri()}"></object></body></html>'
    )
    (folder / "real" / "img.png").symlink_to(secret)
    (folder / "evil.html").symlink_to("/etc/passwd")
    out, outputs = tmp_path / "out", [tmp_path / name for name in ("out", "cache", "logs", "data", "results")]
    common = [f"input={folder}", "queries=none", "spec.name=links", f"out_dir={out}"]

    refused = build(common, tmp_path)
    assert refused.returncode == 2, refused.stderr[-3000:]
    last = refused.stderr.strip().splitlines()[-1]
    assert (
        last.startswith("build error: input=") and f"{folder / 'evil.html'} is a symbolic link to /etc/passwd" in last
    )
    assert "Traceback" not in refused.stderr and not out.exists()

    skipped = build([*common, "folder.links=skip"], tmp_path)
    assert skipped.returncode == 0, skipped.stderr[-3000:]
    assert "evil" in skipped.stdout and "symbolic link" in skipped.stdout  # the left-out document, reported
    info = json.loads((out / "benchmark.json").read_text())
    assert list(info["built_by"]["failed_documents"]) == ["evil"], info["built_by"]["failed_documents"]
    from vldocir.data.benchmark import load_benchmark

    bench = load_benchmark(out)
    assert list(bench.documents["doc_id"]) == ["real"]
    assert "97 tonnes" in " ".join(bench.pages["dom_text"])
    for table, columns in (("pages", ("dom_text", "ocr_text")), ("elements", ("text",))):
        frame = getattr(bench, table)
        for column in columns:
            assert not frame[column].fillna("").str.contains("root:x:0|planted-secret").any(), (table, column)
    [layout] = (tmp_path / "cache").rglob("real/layout.json")  # the guard saw (and aborted) every reference
    blocked = set(json.loads(layout.read_text())["blocked_requests"])
    assert {"file:///etc/passwd", secret.as_uri(), (folder / "real" / "img.png").as_uri()} <= blocked, blocked
    for text in ("root:x:0", "planted-secret"):
        assert files_holding(text, *outputs) == [], text


@pytest.mark.parametrize("doc_id", ["../../x", "a b\nc", "..", "a\\b", "x\x00"])
def test_an_index_document_id_that_could_name_another_file_is_one_line(tmp_path, doc_id):
    (tmp_path / "a.html").write_text("<p>a</p>")
    (tmp_path / "index.jsonl").write_text(json.dumps({"doc_id": doc_id, "source": "arxiv", "path": "a.html"}) + "\n")
    with pytest.raises(ConfigError, match=r"index\.jsonl:1: not an index row \(document id .* is not a folder") as e:
        load_documents(tmp_path)
    assert "\n" not in str(e.value)
