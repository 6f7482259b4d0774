/* The live page of agent runs: start a run, then every agent.step / agent.updated event on the
   socket re-reads that run (GET /api/v1/agent-runs/<id>/) and draws its steps; waiting calls get
   Approve / Reject buttons, a run not ended a Cancel button. Runs waiting for approval come
   first, then newest first (as the list API), kept so as runs start, wait and end. */
(function () {
  "use strict";
  var root = document.getElementById("agents-live");
  var runsEl = document.getElementById("runs");
  var stateEl = document.getElementById("socket-state");
  var ZERO = "00000000-0000-0000-0000-000000000000";
  var FINAL = {completed: true, cancelled: true};
  var boxes = {};
  var runs = {};  // id -> {id, status, created}: what the order is made of
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

  function before(a, b) {
    var waitingA = a.status === "waiting_approval", waitingB = b.status === "waiting_approval";
    if (waitingA !== waitingB) return waitingA ? -1 : 1;
    if (a.created !== b.created) return b.created - a.created;
    return a.id < b.id ? 1 : -1;  // the list API's tie-break: (-created_at, -id)
  }
  function order() {
    var sorted = Object.keys(runs).map(function (id) { return runs[id]; }).sort(before);
    // Only the boxes out of place move, so a box's buttons keep their focus when nothing moves.
    sorted.forEach(function (run, i) {
      var box = boxes[run.id];
      if (runsEl.children[i] !== box) runsEl.insertBefore(box, runsEl.children[i] || null);
    });
  }

  /* A run from the list (its row) or from its detail (with steps); a row does not wipe the
     steps a detail drew. */
  function draw(run) {
    var box = boxes[run.id];
    if (!box) {
      box = boxes[run.id] = el("div", "agent-run");
      box.id = "run-" + run.id;
      runsEl.appendChild(box);
      document.getElementById("runs-empty").hidden = true;
    } else if (!run.steps && box.dataset.detailed) {
      return;
    }
    runs[run.id] = {id: run.id, status: run.status, created: Date.parse(run.created_at)};
    order();
    if (run.steps) box.dataset.detailed = "1";
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
      tr.appendChild(el("td", "step-index", String(step.index)));
      tr.appendChild(el("td", "step-name", step.kind === "model" ? "turn " + step.turn : step.name));
      tr.appendChild(el("td", "step-status", step.status + (step.is_error ? " (error)" : "")));
      tr.appendChild(el("td", "step-text", stepText(step)));
      var actions = el("td", "step-actions");
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

  function listed(query) {
    return fetch(root.dataset.listUrl + query, {credentials: "same-origin"}).then(function (r) {
      return r.ok ? r.json().then(function (page) { return page.results; }) : [];
    });
  }

  /* The ten newest runs and every run waiting for approval (however old), placed at once from
     their rows, then each re-read with its steps. */
  function loadList() {
    Promise.all([listed("?page_size=10"), listed("?status=waiting_approval&page_size=50")])
      .then(function (pages) {
        var seen = {};
        var rows = pages[0].concat(pages[1]).filter(function (run) {
          var fresh = !boxes[run.id] && !seen[run.id];
          seen[run.id] = true;
          return fresh;
        });
        rows.forEach(draw);
        rows.forEach(function (run) { refresh(run.id); });
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
