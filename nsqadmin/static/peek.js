// Peek at a channel's backlog (--enable-peek): GET /api/peek/<topic>/<channel>?n=N when the button is
// pressed, one table per nsqd, every value shown with textContent only, so a body is never parsed as HTML.
"use strict";

(function () {
  const panel = document.getElementById("peek");
  if (!panel) return;
  const count = document.getElementById("peek-count");
  const hex = document.getElementById("peek-hex");
  const status = document.getElementById("peek-status");
  const nodes = document.getElementById("peek-nodes");
  const button = document.getElementById("peek-go");
  let answer = null;

  function cell(tag, className, text) {
    const element = document.createElement(tag);
    if (className) element.className = className;
    element.textContent = text;
    return element;
  }

  function utf8Hex(text) {
    return Array.from(new TextEncoder().encode(text), function (b) { return b.toString(16).padStart(2, "0"); }).join("");
  }

  function body(message) {
    const asHex = message.body_hex !== undefined ? message.body_hex : (hex.checked ? utf8Hex(message.body_text) : null);
    const shown = asHex === null ? message.body_text : asHex.replace(/(..)/g, "$1 ").trim();
    const pre = cell("pre", asHex === null ? "tail-body" : "tail-body tail-hex", shown);
    const td = document.createElement("td");
    td.appendChild(pre);
    if (message.truncated) td.appendChild(cell("div", "muted small", "cut: " + message.size + " B in all"));
    return td;
  }

  function row(message, index) {
    const tr = document.createElement("tr");
    const when = new Date(Math.floor(message.timestamp / 1e6)).toISOString().replace("T", " ").replace("Z", "");
    [String(index + 1), message.id, when, String(message.attempts), message.queue, message.size + " B"].forEach(
      function (text, column) { tr.appendChild(cell("td", column === 0 || column >= 3 ? "num" : "mono", text)); });
    tr.appendChild(body(message));
    return tr;
  }

  function nodeTable(node) {
    const section = document.createElement("div");
    section.className = "peek-node";
    const counts = node.depth + " queued (" + node.backend_depth + " on disk), " + node.in_flight_count +
      " in flight, " + node.deferred_count + " deferred" + (node.paused ? ", paused" : "");
    section.appendChild(cell("h3", "", node.hostname + " " + node.node));
    section.appendChild(cell("p", "muted small", "showing " + node.messages.length + " of " + counts));
    if (!node.messages.length) return section;
    const table = document.createElement("table");
    table.className = "data peek-messages";
    const head = document.createElement("tr");
    ["#", "ID", "Timestamp (UTC)", "Attempts", "Queue", "Size", "Body"].forEach(function (text) {
      head.appendChild(cell("th", "", text));
    });
    table.appendChild(document.createElement("thead")).appendChild(head);
    const rows = table.appendChild(document.createElement("tbody"));
    node.messages.forEach(function (message, index) { rows.appendChild(row(message, index)); });
    section.appendChild(table);
    return section;
  }

  function render() {
    nodes.replaceChildren();
    if (!answer) return;
    answer.nodes.forEach(function (node) { nodes.appendChild(nodeTable(node)); });
    if (answer.message) nodes.appendChild(cell("p", "warn small", answer.message));
  }

  function peek() {
    status.textContent = "Reading…";
    button.disabled = true;
    fetch(panel.dataset.url + "?n=" + encodeURIComponent(count.value), { headers: { Accept: "application/json" } })
      .then(function (response) {
        return response.json().then(function (data) {
          if (!response.ok) throw new Error(data.message || response.statusText);
          return data;
        });
      })
      .then(function (data) {
        answer = data;
        status.textContent = "Read at " + new Date().toISOString().replace("T", " ").slice(0, 19) + " UTC";
        render();
      })
      .catch(function (error) { status.textContent = "Could not peek: " + error.message; })
      .finally(function () { button.disabled = false; });
  }

  button.addEventListener("click", peek);
  hex.addEventListener("change", render);
})();
