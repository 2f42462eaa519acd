// qfence console forms: the plan editor's dependent choices and the registration form's
// per-type fields. Plain JavaScript over data the server embeds in the page; the server stays
// the authority and the forms work without this file.
(function () {
  "use strict";
  document.documentElement.classList.add("js");

  function option(select, value, label) {
    const o = document.createElement("option");
    o.value = value;
    o.textContent = label;
    select.appendChild(o);
  }

  // Replaces a select's options with `values` ([value, label] pairs). The current value is
  // kept when it fits; when it does not, it is kept (marked) only if `keepMisfit`, so a value
  // the server showed is never silently dropped, while a new pick clears what no longer fits.
  function fill(select, values, blank, keepMisfit) {
    const cur = select.value;
    select.innerHTML = "";
    option(select, "", blank);
    values.forEach(function (v) { option(select, v[0], v[1]); });
    const fits = values.some(function (v) { return v[0] === cur; });
    if (cur && !fits && keepMisfit) option(select, cur, cur + " (does not fit)");
    select.value = fits || keepMisfit ? cur : "";
    if (!select.value && values.length === 1) select.value = values[0][0];
  }

  function editor(data) {
    const form = document.getElementById("plan-form");
    const allRoles = ["fence", "shield", "readiness", "health", "recovery", "switchover", "dead-man", "service"];

    function capsOf(ctrl) {
      const c = data.controllers[ctrl];
      // A capability its latest test graded failed cannot work: never offered.
      if (c) return (data.types[c.type] || []).filter(function (cap) { return (c.failed || []).indexOf(cap.name) < 0; });
      // No controller picked: every capability a registered controller has.
      const seen = {};
      const out = [];
      Object.keys(data.controllers).forEach(function (n) {
        (data.types[data.controllers[n].type] || []).forEach(function (cap) {
          if (!seen[cap.name]) { seen[cap.name] = true; out.push(cap); }
        });
      });
      return out.sort(function (a, b) { return a.name < b.name ? -1 : 1; });
    }

    function isService(tr) {
      return tr.closest("fieldset").dataset.service === "true";
    }

    function spec(tr) {
      const ctrl = tr.querySelector(".b-controller").value;
      const cap = tr.querySelector(".b-capability").value;
      return data.controllers[ctrl] ? capsOf(ctrl).find(function (c) { return c.name === cap; }) : null;
    }

    function onRole(tr) {
      const s = spec(tr);
      const role = tr.querySelector(".b-role").value;
      const req = tr.querySelector(".b-required");
      const may = role === "fence" && !(s && s.level === "application");
      // A ticked box that no longer fits stays enabled, so it can be unticked.
      req.disabled = !may && !req.checked;
    }

    function onCapability(tr, keepMisfit) {
      const s = spec(tr);
      const service = isService(tr);
      const roles = (s ? s.roles : allRoles).filter(function (r) { return (r === "service") === service; });
      fill(tr.querySelector(".b-role"), roles.map(function (r) { return [r, r]; }), "— role —", keepMisfit);
      const res = tr.querySelector(".b-resource");
      res.placeholder = s ? s.resource : "";
      const params = tr.querySelector(".b-params");
      params.placeholder = s ? (s.params === "(none)" ? "no params" : "params: " + s.params) : "";
      const dl = document.getElementById(res.getAttribute("list"));
      if (dl) {
        const ctrl = tr.querySelector(".b-controller").value;
        const cap = tr.querySelector(".b-capability").value;
        dl.innerHTML = "";
        (data.discovered[ctrl] || []).forEach(function (d) {
          if (d.capability && d.capability !== cap) return;
          option(dl, d.resource, d.description);
        });
      }
      onRole(tr);
    }

    function onController(tr, keepMisfit) {
      const caps = capsOf(tr.querySelector(".b-controller").value);
      fill(tr.querySelector(".b-capability"), caps.map(function (c) { return [c.name, c.name]; }), "— capability —", keepMisfit);
      onCapability(tr, keepMisfit);
    }

    function bind(tr) {
      tr.querySelector(".b-controller").addEventListener("change", function () { onController(tr, false); });
      tr.querySelector(".b-capability").addEventListener("change", function () { onCapability(tr, false); });
      tr.querySelector(".b-role").addEventListener("change", function () { onRole(tr); });
      tr.querySelector(".b-remove").addEventListener("click", function (e) {
        e.preventDefault();
        const tbody = tr.parentNode;
        const next = tr.nextElementSibling;
        if (next && next.classList.contains("row-errors")) next.remove();
        tr.remove();
        if (!tbody.querySelector("tr.binding")) addRow(tbody.closest("fieldset"));
      });
    }

    function addRow(fieldset) {
      const group = fieldset.dataset.group;
      const rows = fieldset.querySelectorAll("tr.binding");
      const template = rows[rows.length - 1];
      let max = -1;
      rows.forEach(function (r) { max = Math.max(max, parseInt(r.dataset.row.split(":").pop(), 10)); });
      const key = "b:" + group + ":" + (max + 1);
      const tr = template ? template.cloneNode(true) : null;
      if (!tr) return;
      const old = tr.dataset.row;
      tr.dataset.row = key;
      tr.querySelectorAll("[name]").forEach(function (el) {
        el.name = el.name.replace(old + ":", key + ":");
        if (el.tagName === "INPUT" && el.type !== "checkbox") el.value = "";
        if (el.type === "checkbox") el.checked = false;
        if (el.tagName === "SELECT") el.value = "";
        el.removeAttribute("aria-invalid");
        if (el.classList.contains("b-remove")) el.value = "remove:" + key.slice(2);
      });
      tr.querySelectorAll(".field-error").forEach(function (p) { p.remove(); });
      const res = tr.querySelector(".b-resource");
      const dl = tr.querySelector("datalist");
      dl.id = "dl-" + key;
      res.setAttribute("list", dl.id);
      if (isServiceSet(fieldset)) tr.querySelector(".b-role").value = "service";
      fieldset.querySelector("tbody").appendChild(tr);
      bind(tr);
      onController(tr, false);
      tr.querySelector(".b-controller").focus();
    }

    function isServiceSet(fieldset) { return fieldset.dataset.service === "true"; }

    form.querySelectorAll("tr.binding").forEach(function (tr) {
      bind(tr);
      // Narrow what the server offered to what fits, keeping every value it showed.
      onController(tr, true);
    });
    form.querySelectorAll(".b-add").forEach(function (b) {
      b.addEventListener("click", function (e) {
        e.preventDefault();
        addRow(b.closest("fieldset"));
      });
    });
  }

  function register(data) {
    const type = document.getElementById("type");
    if (!type) return;
    function show() {
      const t = type.value;
      document.querySelectorAll("[data-types]").forEach(function (el) {
        const on = !t || el.dataset.types.split(" ").indexOf(t) >= 0;
        el.hidden = !on;
      });
      const hint = document.getElementById("type-hint");
      if (hint) hint.textContent = data.types[t] || "";
    }
    type.addEventListener("change", show);
    show();
  }

  const e = document.getElementById("editor-data");
  if (e) editor(JSON.parse(e.textContent));
  const r = document.getElementById("register-data");
  if (r) register(JSON.parse(r.textContent));
})();
