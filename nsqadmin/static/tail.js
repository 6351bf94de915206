// Live tail of a topic (--enable-live-tail): an EventSource on /api/tail/<topic>, each message shown
// with textContent only, so a body is never parsed as HTML. Closing the page or pressing Stop closes
// the stream, and nsqadmin then closes the ephemeral channel it read from.
"use strict";

(function () {
  const MAX_SHOWN = 200;
  const panel = document.getElementById("live-tail");
  if (!panel || !document.getElementById("tail-toggle")) return;
  const list = document.getElementById("tail-messages");
  const status = document.getElementById("tail-status");
  const dropped = document.getElementById("tail-dropped");
  const toggle = document.getElementById("tail-toggle");
  let source = null;

  function cell(tag, className, text) {
    const element = document.createElement(tag);
    element.className = className;
    element.textContent = text;
    return element;
  }

  function showDropped(count) {
    dropped.textContent = count ? count + " dropped (over 20/s)" : "";
  }

  function show(message) {
    const item = document.createElement("li");
    const when = new Date(Math.floor(message.timestamp / 1e6)).toISOString().replace("T", " ").replace("Z", "");
    const meta = when + " · " + message.nsqd + " · id " + message.id + " · attempt " + message.attempts +
      " · " + message.size + " B" + (message.truncated ? " (cut to 4 KiB)" : "");
    item.appendChild(cell("div", "tail-meta muted small", meta));
    if (message.body_hex !== undefined) {
      item.appendChild(cell("pre", "tail-body tail-hex", message.body_hex.replace(/(..)/g, "$1 ").trim()));
    } else {
      item.appendChild(cell("pre", "tail-body", message.body_text));
    }
    list.insertBefore(item, list.firstChild);
    while (list.childElementCount > MAX_SHOWN) list.removeChild(list.lastChild);
    showDropped(message.dropped);
  }

  function stop(why) {
    if (source) source.close();
    source = null;
    status.textContent = why;
    toggle.textContent = "Start";
  }

  function start() {
    source = new EventSource(panel.dataset.url);
    status.textContent = "Connecting…";
    toggle.textContent = "Stop";
    source.addEventListener("ready", function (event) {
      status.textContent = "Reading on " + JSON.parse(event.data).channel;
    });
    source.addEventListener("message", function (event) { show(JSON.parse(event.data)); });
    source.addEventListener("dropped", function (event) { showDropped(JSON.parse(event.data).dropped); });
    source.onerror = function () {
      if (source && source.readyState === EventSource.CLOSED) stop("The stream ended: start again to resume.");
    };
  }

  toggle.addEventListener("click", function () {
    if (source) stop("Stopped.");
    else start();
  });
  window.addEventListener("pagehide", function () { if (source) source.close(); });
})();
