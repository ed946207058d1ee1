"""Gradio's upload folder, bounded as a whole: an upload that would take it past its cap is refused (413).

Gradio bounds each file (`max_file_size`), not the folder that keeps every upload and every file the
app hands back (`GRADIO_TEMP_DIR`, else the system's temp folder + `gradio`): uploads add up until the
disk is full. `UploadFolderCap` counts the folder before each upload and refuses one whose declared
length does not fit what is left, counting uploads still in flight, so concurrent ones cannot overrun
it together. An upload must declare its length (browsers and `gradio_client` do); one without gets 411.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from reflectrm.serving.guard import plain_reply, request_header, respond
from reflectrm.serving.hosts import Refusal

UPLOAD_ROUTES = ("/gradio_api/upload", "/gradio_api/process_recording")
"""Gradio's routes that write a request's body to disk."""

MB = 1 << 20


def folder_bytes(folder: Path) -> int:
    """The bytes of every file under `folder` (links not followed); 0 when it does not exist yet."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:  # removed meanwhile (Gradio moves uploads into its cache)
                continue
    return total


class UploadFolderCap:
    """ASGI middleware: an upload that would take `folder` past `max_bytes` gets 413, before its body is read."""

    def __init__(self, app: Any, *, folder: Path, max_bytes: int, setting: str = "REFLECTRM_UPLOAD_FOLDER_MAX_MB"
                 ) -> None:
        self.app, self.folder, self.max_bytes, self.setting = app, folder, max_bytes, setting
        self.in_flight = 0  # bytes of admitted uploads still streaming (changed on the event loop only)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or \
                scope.get("path", "").rstrip("/") not in UPLOAD_ROUTES:
            await self.app(scope, receive, send)
            return
        declared = request_header(scope, b"content-length")
        if declared is None or not declared.isascii() or not declared.isdigit():
            await respond(send, Refusal(411, "an upload must declare its length (Content-Length): send the file "
                                             "whole, not chunked"), plain_reply)
            return
        used = await asyncio.to_thread(folder_bytes, self.folder)
        if used + self.in_flight + int(declared) > self.max_bytes:  # no await between this check and the count
            await respond(send, self._full(used, int(declared)), plain_reply)
            return
        self.in_flight += int(declared)
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= int(declared)

    def _full(self, used: int, size: int) -> Refusal:
        return Refusal(413, f"the upload folder {self.folder} holds {used / MB:.1f} MB of the "
                            f"{self.max_bytes / MB:.0f} MB it may hold, too little room for {size / MB:.1f} MB: "
                            f"delete old files there, or raise {self.setting}")
