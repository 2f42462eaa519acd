// qfence console: the live parts. Plain JavaScript, no build step.
//
// An element with data-live="URL" subscribes to the server-sent events at URL; each event is
// named after the id of the element it replaces (its HTML is rendered by the server with the
// page's own template). On a plan's page the action area is such a part: the server renders
// the actions the plan's state offers, each form carrying the current generation, so a click
// acts on what the operator sees. What the operator typed or picked is kept across the swap.
(function () {
  "use strict";
  function indicator(text, cls) {
    var el = document.getElementById("live-state");
    if (!el) return;
    el.hidden = false;
    el.textContent = text;
    el.className = "live-state " + cls;
  }
  // A form's fields by its action and their name: "switchover/reason".
  function fields(target, each) {
    target.querySelectorAll("form.action").forEach(function (f) {
      var op = f.querySelector("input[name=op]");
      if (!op) return;
      f.querySelectorAll("input:not([type=hidden]), select").forEach(function (el) {
        each(op.value + "/" + el.name, el);
      });
    });
  }
  function state(target) {
    var el = target.querySelector("[data-state]");
    return el ? el.getAttribute("data-state") : null;
  }
  // Swaps in the action area the server rendered for the plan's state now; says so when that
  // state changed, and keeps the operator's input where the new forms have the same field
  // (a choice only if it is still offered: the server decides what is).
  function swapActions(target, html) {
    var next = document.createElement("div");
    next.innerHTML = html;
    // The last state shown, even across an update that had none (the status unreadable for a
    // moment): a state that differs from it is news.
    var was = state(target) || target.getAttribute("data-shown-state");
    // The same state renders the same actions (the stream's first event, a reconnect): the
    // operator's form is left alone, an open list or a field being typed in included.
    if (was !== null && state(next) === was) return;
    var kept = {};
    fields(target, function (key, el) { kept[key] = el.value; });
    var focused = document.activeElement;
    var focusId = focused && target.contains(focused) ? focused.id : null;
    target.innerHTML = html;
    fields(target, function (key, el) {
      var v = kept[key];
      if (v === undefined) return;
      if (el.tagName === "SELECT") {
        for (var i = 0; i < el.options.length; i++) {
          if (el.options[i].value === v) el.value = v;
        }
      } else {
        el.value = v;
      }
    });
    if (focusId) {
      var again = document.getElementById(focusId);
      if (again) again.focus({ preventScroll: true });
    }
    var now = state(target);
    if (now !== null) target.setAttribute("data-shown-state", now);
    if (was !== null && now !== null && now !== was) {
      var notice = document.getElementById("actions-updated");
      if (notice) notice.hidden = false;
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
        if (target.id === "plan-actions") swapActions(target, e.data);
        else target.innerHTML = e.data;
        indicator("live", "on");
      });
    });
  });
})();
