/* The live page of agent runs: start a run, then every agent.step / agent.updated event on the
   socket re-reads that run (GET /api/v1/agent-runs/<id>/) and draws its steps; waiting calls get
   Approve / Reject buttons, a run not ended a Cancel button. */
(function () {
  "use strict";
  var root = document.getElementById("agents-live");
  var runsEl = document.getElementById("runs");
  var stateEl = document.getElementById("socket-state");
  var ZERO = "00000000-0000-0000-0000-000000000000";
  var FINAL = {completed: true, cancelled: true};
  var boxes = {};
  var retries = 0;

  function cookie(name) {
    var m = document.cookie.match("(?:^|; )" + name + "=([^;]*)");
    return m ? decodeURIComponent(m[1]) : "";
  }
  function urlFor(id) { return root.dataset.runUrl.replace(ZERO, id); }
  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function post(url, body) {
    return fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: {"Content-Type": "application/json", "X-CSRFToken": cookie("csrftoken")},
      body: body === undefined ? undefined : JSON.stringify(body)
    }).then(function (r) {
      return r.json().catch(function () { return null; }).then(function (data) {
        return {status: r.status, ok: r.ok, body: data};
      });
    });
  }
  function short(value) {
    var text = typeof value === "string" ? value : JSON.stringify(value);
    return text && text.length > 160 ? text.slice(0, 160) + "..." : (text || "");
  }
  function stepText(step) {
    if (step.kind === "model") {
      var blocks = step.output || [];
      var texts = blocks.filter(function (b) { return b.type === "text"; }).map(function (b) { return b.text; });
      var calls = blocks.filter(function (b) { return b.type === "tool_use"; }).map(function (b) { return b.name; });
      return texts.join(" ") + (calls.length ? " -> " + calls.join(", ") : "");
    }
    return short(step.input) + (step.output !== null ? " => " + short(step.output) : "");
  }

  function draw(run) {
    var box = boxes[run.id];
    if (!box) {
      box = boxes[run.id] = el("div", "agent-run module");
      box.id = "run-" + run.id;
      runsEl.insertBefore(box, runsEl.firstChild);
      document.getElementById("runs-empty").hidden = true;
    }
    box.textContent = "";
    var head = el("h3", "", "Run " + run.id.slice(0, 8) + ": ");
    var status = el("span", "status status-" + run.status, run.status);
    status.setAttribute("data-status", run.status);
    head.appendChild(status);
    head.appendChild(document.createTextNode(" | turns " + run.turns + " | $" + run.cost_usd));
    box.appendChild(head);
    if (run.error) box.appendChild(el("p", "live-error", run.error.code + ": " + run.error.message));
    if (run.output) box.appendChild(el("p", "agent-output", run.output.text));
    var table = el("table", "agent-steps");
    (run.steps || []).forEach(function (step) {
      var tr = el("tr", "step step-" + step.status);
      tr.setAttribute("data-call-id", step.call_id || "");
      tr.appendChild(el("td", "", String(step.index)));
      tr.appendChild(el("td", "", step.kind === "model" ? "turn " + step.turn : step.name));
      tr.appendChild(el("td", "step-status", step.status + (step.is_error ? " (error)" : "")));
      tr.appendChild(el("td", "", stepText(step)));
      var actions = el("td", "");
      if (step.status === "waiting_approval") {
        [["Approve", true], ["Reject", false]].forEach(function (choice) {
          var button = el("button", "button", choice[0]);
          button.type = "button";
          button.addEventListener("click", function () {
            button.disabled = true;
            post(urlFor(run.id) + "approvals/" + encodeURIComponent(step.call_id) + "/",
                 {approve: choice[1], reason: choice[1] ? "" : "Rejected on the live page."})
              .then(function (answer) { if (answer.ok) draw(answer.body); });
          });
          actions.appendChild(button);
        });
      }
      tr.appendChild(actions);
      table.appendChild(tr);
    });
    box.appendChild(table);
    if (!FINAL[run.status]) {
      var cancel = el("button", "button cancel-run", "Cancel run");
      cancel.type = "button";
      cancel.addEventListener("click", function () {
        cancel.disabled = true;
        post(urlFor(run.id) + "cancel/").then(function (answer) { if (answer.ok) draw(answer.body); });
      });
      box.appendChild(cancel);
    }
  }

  function refresh(id) {
    return fetch(urlFor(id), {credentials: "same-origin"}).then(function (r) {
      if (r.ok) return r.json().then(draw);
    });
  }

  function loadList() {
    fetch(root.dataset.listUrl, {credentials: "same-origin"}).then(function (r) {
      if (!r.ok) return;
      return r.json().then(function (page) {
        page.results.slice(0, 10).reverse().forEach(function (run) { refresh(run.id); });
      });
    });
  }

  function connect() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + location.host + "/ws/jobs/");
    socket.onopen = function () {
      stateEl.textContent = "live";
      stateEl.className = "socket-state live";
      if (retries > 0) Object.keys(boxes).forEach(refresh);
      retries = 0;
    };
    socket.onmessage = function (e) {
      var event = JSON.parse(e.data);
      if ((event.type === "agent.step" || event.type === "agent.updated") && event.run) {
        refresh(event.run.id);
      }
    };
    socket.onclose = function (e) {
      if (e.code >= 4400 && e.code < 4500) {
        stateEl.textContent = "closed";
        stateEl.className = "socket-state gone";
        return;
      }
      var delay = Math.min(30000, 1000 * Math.pow(2, retries)) * (0.5 + Math.random() / 2);
      retries += 1;
      stateEl.textContent = "reconnecting";
      stateEl.className = "socket-state down";
      setTimeout(connect, delay);
    };
  }

  document.getElementById("run-form").addEventListener("submit", function (e) {
    e.preventDefault();
    var errorEl = document.getElementById("run-error");
    errorEl.textContent = "";
    var tools = Array.prototype.slice.call(document.querySelectorAll("input[name=tools]:checked"))
      .map(function (input) { return input.value; });
    post(root.dataset.listUrl, {
      feature: document.getElementById("feature").value,
      model: document.getElementById("model").value,
      messages: [{role: "user", content: document.getElementById("prompt").value}],
      max_tokens: parseInt(document.getElementById("max_tokens").value, 10),
      max_turns: parseInt(document.getElementById("max_turns").value, 10),
      tools: tools
    }).then(function (answer) {
      if (answer.status !== 202) {
        errorEl.textContent = (answer.body && answer.body.message) || ("HTTP " + answer.status);
        return;
      }
      refresh(answer.body.id);
    });
  });

  loadList();
  connect();
})();
