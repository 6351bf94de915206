// nsqadmin: small enhancements; every page works without this file.
"use strict";

// Ask in a dialog instead of on a confirmation page.
document.addEventListener("submit", function (event) {
  var form = event.target;
  var question = form.getAttribute("data-confirm");
  if (!question) { return; }
  if (!window.confirm(question)) { event.preventDefault(); return; }
  var confirmed = document.createElement("input");
  confirmed.type = "hidden";
  confirmed.name = "confirm";
  confirmed.value = "yes";
  form.appendChild(confirmed);
});

// The counter page: poll the total and show the rate.
(function () {
  var box = document.querySelector("[data-counter-url]");
  if (!box) { return; }
  var totalEl = document.getElementById("counter-total");
  var rateEl = document.getElementById("counter-rate");
  var url = box.getAttribute("data-counter-url");
  var last = null;
  function total(stats) {
    var sum = 0;
    Object.keys(stats).forEach(function (key) { sum += stats[key].message_count; });
    return sum;
  }
  function poll() {
    fetch(url, { headers: { "Accept": "application/json" } })
      .then(function (response) { return response.json(); })
      .then(function (body) {
        if (!body.stats) { return; }
        var now = Date.now();
        var value = total(body.stats);
        totalEl.textContent = value.toLocaleString("en-US");
        if (last !== null && now > last.time) {
          var rate = Math.max(0, (value - last.value) * 1000 / (now - last.time));
          rateEl.textContent = Math.round(rate).toLocaleString("en-US") + " msgs/s";
        }
        last = { time: now, value: value };
      })
      .catch(function () { rateEl.textContent = "cannot reach nsqadmin"; })
      .finally(function () { window.setTimeout(poll, 2000); });
  }
  poll();
})();
