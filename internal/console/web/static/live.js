// Live refresh without a full reload: every data-refresh seconds, fetch this page's <main> (the
// server renders only it for X-Pgdrain-Fragment) and swap it in. Pages work without this script
// (a <noscript> meta refresh reloads them instead). Paused while the tab is hidden or a field
// of the page has focus, so a half-typed form is not replaced.
(function () {
  "use strict";
  var main = document.getElementById("live");
  var seconds = parseInt(document.body.getAttribute("data-refresh"), 10) || 5;
  function schedule() { window.setTimeout(tick, seconds * 1000); }
  function tick() {
    var focused = document.activeElement;
    if (document.hidden || (focused && focused !== document.body && main.contains(focused))) {
      schedule();
      return;
    }
    fetch(window.location.href, { headers: { "X-Pgdrain-Fragment": "1" }, credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.text();
      })
      .then(function (html) {
        main.innerHTML = html;
        document.body.classList.remove("stale");
      })
      .catch(function () { document.body.classList.add("stale"); })
      .then(schedule);
  }
  schedule();
})();
