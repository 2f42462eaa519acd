// qfence console: the live parts. Plain JavaScript, no build step.
//
// An element with data-live="URL" subscribes to the server-sent events at URL; each event is
// named after the id of the element it replaces (its HTML is rendered by the server with the
// page's own template). On a plan's page, a generation other than the one the page was
// loaded with disables the action forms: an operator acts on what they saw, or reloads.
(function () {
  "use strict";
  function indicator(text, cls) {
    var el = document.getElementById("live-state");
    if (!el) return;
    el.hidden = false;
    el.textContent = text;
    el.className = "live-state " + cls;
  }
  function guard(root) {
    var seen = root.getAttribute("data-generation");
    if (seen === null) return;
    var st = document.getElementById("plan-status");
    if (!st) return;
    var now = st.getAttribute("data-generation");
    if (now !== null && now !== seen) {
      var banner = document.getElementById("stale");
      if (banner) banner.hidden = false;
      document.querySelectorAll("form.action button").forEach(function (b) {
        b.disabled = true;
      });
    }
  }
  document.querySelectorAll("[data-live]").forEach(function (root) {
    if (!window.EventSource) return;
    var es = new EventSource(root.getAttribute("data-live"));
    es.onopen = function () { indicator("live", "on"); };
    es.onerror = function () { indicator("reconnecting…", "off"); };
    es.addEventListener("live-error", function (e) {
      indicator("live: " + e.data, "off");
    });
    root.querySelectorAll("[id]").forEach(function (target) {
      es.addEventListener(target.id, function (e) {
        target.innerHTML = e.data;
        indicator("live", "on");
        guard(root);
      });
    });
  });
})();
