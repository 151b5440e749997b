"""`vlmprep serve`'s media policy, in process: where images may come from, and the time, byte and pixel limits.

Fetches go to a tiny HTTP server on 127.0.0.1 started here (a PNG, a redirect, a body that never ends, a URL that never
answers); nothing leaves the machine. The policy's refusals come before any connection or file read.
"""

from __future__ import annotations

import http.server
import io
import threading
import time

import numpy as np
import pytest
from PIL import Image
from serve_client import huge_png_header

from vlmprep.serving.media import MediaRefused, load_request_image
from vlmprep.serving.policy import ServingPolicy


def _png(size: int = 8) -> bytes:
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (size, size, 3), dtype=np.uint8), mode="RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


class _Handler(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        _Handler.hits.append(self.path)
        if self.path == "/image.png":
            body = _png()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", self.path.split("to=", 1)[1])
            self.end_headers()
        elif self.path == "/endless":
            self.send_response(200)
            self.end_headers()
            try:
                for _ in range(10_000):
                    self.wfile.write(b"\0" * 65536)
            except OSError:
                pass
        elif self.path == "/hang":
            time.sleep(3)
        else:
            self.send_response(404)
            self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def local_http():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _policy(**overrides) -> ServingPolicy:
    return ServingPolicy(**{"allowed_media_domains": ("localhost",), "media_fetch_timeout": 1.0, **overrides})


def test_local_files_are_refused_alike_unless_under_an_allowed_directory(tmp_path):
    (tmp_path / "image.png").write_bytes(_png())
    refusals = set()
    for url in ("/etc/passwd", str(tmp_path / "image.png"), (tmp_path / "image.png").as_uri(), "/no/such/file.png"):
        with pytest.raises(MediaRefused) as refused:
            load_request_image(url, ServingPolicy())
        refusals.add(str(refused.value))
    assert len(refusals) == 1 and "--allowed-local-media-path" in refusals.pop()  # no existing-file oracle
    allowed = ServingPolicy(allowed_local_media_path=(str(tmp_path),))
    assert load_request_image((tmp_path / "image.png").as_uri(), allowed).size == (8, 8)
    (tmp_path / "link.png").symlink_to("/etc/hostname")
    for outside in ("/etc/hostname", str(tmp_path / ".." / "x.png"), str(tmp_path / "link.png")):
        with pytest.raises(MediaRefused, match="allowed-local-media-path"):
            load_request_image(outside, allowed)


def test_internal_addresses_are_never_contacted_by_default(local_http):
    _Handler.hits.clear()
    with pytest.raises(MediaRefused, match="private, loopback"):
        load_request_image(f"http://localhost:{local_http}/image.png", _policy())
    with pytest.raises(MediaRefused, match="allowed-media-domains"):
        load_request_image(f"http://127.0.0.1:{local_http}/image.png", _policy())
    with pytest.raises(MediaRefused, match="unsupported URL scheme"):
        load_request_image("gopher://localhost/x", _policy())
    assert _Handler.hits == []  # refused before any connection: no open/closed port oracle
    allowed = _policy(allow_private_media_addresses=True)
    assert load_request_image(f"http://localhost:{local_http}/image.png", allowed).size == (8, 8)


def test_redirects_are_checked_against_the_policy(local_http):
    allowed = _policy(allow_private_media_addresses=True)
    to_other_host = f"http://localhost:{local_http}/redirect?to=http://127.0.0.1:{local_http}/image.png"
    with pytest.raises(MediaRefused, match="allowed-media-domains"):
        load_request_image(to_other_host, allowed)
    to_same_host = f"http://localhost:{local_http}/redirect?to=/image.png"
    assert load_request_image(to_same_host, allowed).size == (8, 8)


def test_fetches_end_at_the_timeout_and_the_byte_limit(local_http):
    allowed = _policy(allow_private_media_addresses=True, max_media_bytes=1_000_000)
    started = time.monotonic()
    with pytest.raises(MediaRefused, match="took over 1 s"):
        load_request_image(f"http://localhost:{local_http}/hang", allowed)
    assert time.monotonic() - started < 2.5
    with pytest.raises(MediaRefused, match="max-media-bytes"):
        load_request_image(f"http://localhost:{local_http}/endless", allowed)


# PIL warns past its own bomb limit while reading the header; the policy's lower limit refuses the image first.
@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_pixels_are_counted_before_decoding_and_bad_data_urls_are_short_refusals():
    import base64

    bomb = "data:image/png;base64," + base64.b64encode(huge_png_header()).decode()
    with pytest.raises(MediaRefused, match="12000x12000 pixels"):
        load_request_image(bomb, ServingPolicy())
    oversized = "data:image/png;base64," + "A" * (15 * 1024 * 1024)
    with pytest.raises(MediaRefused, match="max-media-bytes") as refused:
        load_request_image(oversized, ServingPolicy())
    assert len(str(refused.value)) < 200
    with pytest.raises(MediaRefused, match="not a PNG"):
        load_request_image("data:image/png;base64,bm90IGFuIGltYWdl", ServingPolicy())
    decoded = load_request_image("data:image/png;base64," + base64.b64encode(_png()).decode(), ServingPolicy())
    assert np.array_equal(np.asarray(decoded), np.asarray(Image.open(io.BytesIO(_png())).convert("RGB")))
