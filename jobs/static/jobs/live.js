/* The live page (templates/jobs/live.html): submit a prompt, list the user's jobs and keep them
   current from /ws/jobs/ events, a running job's text as it streams (job.delta). Events sent
   while the socket is down are lost: on reconnect (or a "resync", or a delta that skips ahead)
   the page asks the API for every job it shows that is still moving (a running one's GET has
   its partial text). */
(function () {
  "use strict";
  var root = document.getElementById("live");
  var stateEl = document.getElementById("socket-state");
  var tbody = document.getElementById("jobs");
  var ZERO = "00000000-0000-0000-0000-000000000000";
  var FINAL = {completed: true, failed: true, cancelled: true};
  var CANCELLABLE = {queued: true, retrying: true, running: true};
  var LABELS = ["", "", "Attempts", "Cost", "Output", ""];  // shown on a phone
  var CLASSES = ["job", "status", "attempts", "cost", "output", "actions"];
  // Closes that a new socket would meet again: signed out, not allowed, no such job.
  var GIVE_UP = {4401: "signed out: reload to sign in", 4403: "not allowed", 4404: "not found"};
  var rows = {};
  var latest = {};
  var faultOf = {};
  // A running job's text so far: {attempt, text, length (in code points, as offsets count)}.
  var streamed = {};
  var retries = 0;

  function cookie(name) {
    var m = document.cookie.match("(?:^|; )" + name + "=([^;]*)");
    return m ? decodeURIComponent(m[1]) : "";
  }

  function urlFor(template, id) { return template.replace(ZERO, id); }

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function link(href, text, className) {
    var a = el("a", className, text);
    a.href = href;
    return a;
  }

  function setSocket(text, kind) {
    stateEl.textContent = text;
    stateEl.className = "socket-state " + kind;
  }

  function errorMessage(body, status) {
    return (body && body.message) || ("HTTP " + status);
  }

  function post(url, body) {
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: {"Content-Type": "application/json", "X-CSRFToken": cookie("csrftoken")},
      body: body === undefined ? undefined : JSON.stringify(body)
    }).then(function (r) {
      return r.json().catch(function () { return null; }).then(function (data) {
        return {status: r.status, ok: r.ok, body: data};
      });
    });
  }

  function timeOf(iso) {
    return iso ? new Date(iso).toLocaleTimeString() : "";
  }

  function jobCell(td, job) {
    td.textContent = "";
    td.appendChild(link(urlFor(root.dataset.jobUrl, job.id), job.id, "job-id"));
    var meta = el("div", "job-meta");
    var parts = [job.feature, job.model, timeOf(job.created_at), faultOf[job.id]];
    meta.textContent = parts.filter(Boolean).join(" \u00b7 ");
    if (root.dataset.adminUrl) {
      meta.appendChild(document.createTextNode(" \u00b7 "));
      meta.appendChild(link(urlFor(root.dataset.adminUrl, job.id), "admin", "job-admin"));
      if (job.status === "failed" && root.dataset.dlqUrl) {
        meta.appendChild(document.createTextNode(" \u00b7 "));
        meta.appendChild(link(root.dataset.dlqUrl + "?q=" + job.id, "DLQ", "job-dlq"));
      }
    }
    td.appendChild(meta);
  }

  function outputCell(td, job) {
    td.textContent = "";
    var live = streamed[job.id];
    if (job.status === "running" && live && live.text) {
      td.appendChild(el("div", "output-text streaming", live.text));
    } else if (job.output && job.output.text !== null) {
      td.appendChild(el("div", "output-text", job.output.text));
    }
    if (job.error && !job.output) {
      td.appendChild(el("div", "job-error", job.error.code + ": " + job.error.message));
    }
    if (job.status === "cancelled" && job.output && job.output.stop_reason === "cancelled") {
      td.appendChild(el("div", "job-note", "cancelled mid-call: the text it had written"));
    } else if (job.status === "retrying" && job.next_attempt_at) {
      td.appendChild(el("div", "job-note", "next attempt at " + timeOf(job.next_attempt_at)));
    } else if (job.status === "failed") {
      td.appendChild(el("div", "job-note", "dead-lettered: requeue it from the admin's DLQ"));
    }
  }

  function actionsCell(td, job) {
    td.textContent = "";
    if (FINAL[job.status]) return;
    var button = el("button", "button live-cancel", "Cancel");
    button.type = "button";
    if (!CANCELLABLE[job.status]) {
      button.disabled = true;
      button.title = "This job can no longer be cancelled.";
    }
    button.addEventListener("click", function () { cancel(job.id, button); });
    td.appendChild(button);
  }

  // An event carries only what changes (jobs/events.py): merged into what the row knew.
  function render(update, append) {
    var job = Object.assign({}, latest[update.id] || {}, update);
    latest[job.id] = job;
    if (update.output && typeof update.output.partial_text === "string") {
      // A running job's GET: its attempt's text so far replaces what the page had.
      var text = update.output.partial_text;
      streamed[job.id] = {attempt: job.attempts, text: text, length: Array.from(text).length};
    }
    if (FINAL[job.status]) delete streamed[job.id];
    var tr = rows[job.id];
    if (!tr && !job.feature) fillIn(job.id);  // first heard of in an event
    if (!tr) {
      tr = document.createElement("tr");
      tr.id = "job-" + job.id;
      for (var i = 0; i < CLASSES.length; i++) {
        var td = el("td", CLASSES[i]);
        if (LABELS[i]) td.setAttribute("data-label", LABELS[i]);
        tr.appendChild(td);
      }
      if (append) tbody.appendChild(tr);
      else tbody.prepend(tr);
      rows[job.id] = tr;
    }
    var cells = tr.children;
    tr.setAttribute("data-status", job.status);
    if (job.feature) tr.setAttribute("data-feature", job.feature);
    jobCell(cells[0], job);
    cells[1].textContent = job.status;
    cells[2].textContent = job.attempts;
    cells[3].textContent = job.cost_usd;
    outputCell(cells[4], job);
    actionsCell(cells[5], job);
    addFeature(job.feature);
    applyFilters();
  }

  // --- filters ---------------------------------------------------------------------------
  var statusFilter = document.getElementById("filter-status");
  var featureFilter = document.getElementById("filter-feature");

  function addFeature(feature) {
    if (!feature) return;
    for (var i = 0; i < featureFilter.options.length; i++) {
      if (featureFilter.options[i].value === feature) return;
    }
    featureFilter.appendChild(new Option(feature, feature));
  }

  function applyFilters() {
    var status = statusFilter.value, feature = featureFilter.value;
    var ids = Object.keys(rows), shown = 0;
    ids.forEach(function (id) {
      var tr = rows[id];
      var match = (!status || tr.getAttribute("data-status") === status) &&
        (!feature || tr.getAttribute("data-feature") === feature);
      tr.hidden = !match;
      if (match) shown += 1;
    });
    document.getElementById("jobs-empty").hidden = ids.length > 0;
    document.getElementById("filter-count").textContent =
      ids.length ? shown + " of " + ids.length + " jobs shown" : "";
  }
  statusFilter.addEventListener("change", applyFilters);
  featureFilter.addEventListener("change", applyFilters);

  // --- the API ---------------------------------------------------------------------------
  function fetchJob(id) {
    return fetch(urlFor(root.dataset.jobUrl, id), {credentials: "same-origin"}).then(function (r) {
      if (r.ok) return r.json().then(function (job) { render(job); });
    });
  }

  // What an event leaves out and never changes: what the job is.
  function fillIn(id) {
    fetch(urlFor(root.dataset.jobUrl, id), {credentials: "same-origin"}).then(function (r) {
      if (r.ok) {
        return r.json().then(function (job) {
          render({id: job.id, feature: job.feature, model: job.model, created_at: job.created_at});
        });
      }
    });
  }

  // The newest page of the user's jobs, below any a socket event already showed (newer).
  function loadList() {
    fetch(root.dataset.listUrl, {credentials: "same-origin"}).then(function (r) {
      if (!r.ok) return;
      return r.json().then(function (page) {
        page.results.forEach(function (job) { if (!rows[job.id]) render(job, true); });
      });
    });
  }

  function catchUp() {
    Object.keys(rows).forEach(function (id) {
      if (!FINAL[rows[id].getAttribute("data-status")]) fetchJob(id);
    });
  }

  // A piece of a running job's text: appended at its offset (code points); a new attempt starts
  // again from 0; a piece past what the page has (deltas missed) asks the API for the text.
  function delta(event) {
    var id = event.job, tr = rows[id];
    if (!tr) return;
    var have = streamed[id];
    if (!have || (event.attempt && event.attempt > have.attempt)) {
      have = streamed[id] = {attempt: event.attempt || 0, text: "", length: 0};
    } else if (event.attempt && event.attempt < have.attempt) {
      return;
    }
    if (event.offset > have.length) {
      fetchJob(id);
      return;
    }
    var piece = Array.from(event.text);
    var skip = have.length - event.offset;
    if (skip >= piece.length) return;
    if (skip < 0) skip = 0;
    have.text += piece.slice(skip).join("");
    have.length += piece.length - skip;
    var job = latest[id];
    if (!job || job.status !== "running") return;
    var box = tr.children[4].querySelector(".output-text.streaming");
    if (!box) return outputCell(tr.children[4], job);
    // Follow the end of the text unless the reader scrolled up.
    var following = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
    box.textContent = have.text;
    if (following) box.scrollTop = box.scrollHeight;
  }

  function cancel(id, button) {
    button.disabled = true;
    post(urlFor(root.dataset.jobUrl, id) + "cancel/").then(function (answer) {
      if (answer.ok) return render(answer.body);
      var note = el("div", "job-error", errorMessage(answer.body, answer.status));
      rows[id].children[4].appendChild(note);
      fetchJob(id);
    });
  }

  // --- the socket ------------------------------------------------------------------------
  function connect() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + location.host + "/ws/jobs/");
    socket.onopen = function () {
      setSocket("live", "live");
      if (retries > 0) catchUp();
      retries = 0;
    };
    socket.onmessage = function (e) {
      var event = JSON.parse(e.data);
      if (event.type === "job.updated") render(event.job);
      else if (event.type === "job.delta") delta(event);
      else if (event.type === "resync") catchUp();
    };
    socket.onclose = function (e) {
      if (GIVE_UP[e.code]) {
        setSocket(GIVE_UP[e.code], "gone");
        return;
      }
      // Backoff with jitter: 1, 2, 4 ... 30 s, so that a restart is not met by every page at once.
      var delay = Math.min(30000, 1000 * Math.pow(2, retries)) * (0.5 + Math.random() / 2);
      retries += 1;
      setSocket("reconnecting", "down");
      setTimeout(connect, delay);
    };
  }

  // --- the form --------------------------------------------------------------------------
  var faultSelect = document.getElementById("fault");
  if (faultSelect) {
    faultSelect.addEventListener("change", function () {
      var option = faultSelect.options[faultSelect.selectedIndex];
      document.getElementById("fault-help").textContent = option.getAttribute("data-help");
    });
  }

  document.getElementById("submit-form").addEventListener("submit", function (e) {
    e.preventDefault();
    var errorEl = document.getElementById("submit-error");
    errorEl.textContent = "";
    var job = {
      feature: document.getElementById("feature").value,
      model: document.getElementById("model").value,
      messages: [{role: "user", content: document.getElementById("prompt").value}],
      max_tokens: parseInt(document.getElementById("max_tokens").value, 10)
    };
    var fault = faultSelect ? faultSelect.value : "";
    var sent = fault
      ? post(root.dataset.faultUrl, {fault: fault, job: job})
      : post(root.dataset.listUrl, job);
    sent.then(function (answer) {
      if (answer.status !== 202) {
        errorEl.textContent = errorMessage(answer.body, answer.status);
        return;
      }
      var id = answer.body.id;
      if (fault) faultOf[id] = "fault: " + faultSelect.options[faultSelect.selectedIndex].text;
      // The socket may have told us first: then the POST answer adds only what the job is.
      var seed = {id: id, feature: job.feature, model: job.model};
      if (!rows[id]) {
        seed.status = answer.body.status;
        seed.attempts = 0;
        seed.cost_usd = "0";
      }
      render(seed);
    });
  });

  applyFilters();
  loadList();
  connect();
})();
