/* The ops dashboard (templates/admin/ops/dashboard.html).
 *
 * Asks the page's data.json for the numbers (ops/dashboard.py) on load and every
 * data-refresh-seconds, and updates the charts and tables in place. Charts are drawn by Chart.js
 * (ops/vendor/). No inline script and no HTML built from strings: every value is set as text.
 */
(function () {
    "use strict";

    const root = document.getElementById("ops-dashboard");
    if (!root) {
        return;
    }
    const status = document.getElementById("ops-status");
    if (typeof window.Chart === "undefined") {
        status.textContent = "The chart library did not load.";
        status.classList.add("ops-stale");
        return;
    }
    const Chart = window.Chart;
    const dataUrl = root.dataset.url;
    const refreshMs = Math.max(1, Number(root.dataset.refreshSeconds) || 10) * 1000;
    let hours = Number(root.dataset.hours) || 6;
    let timer = null;
    let inFlight = null;
    let lastSuccess = null;
    let refreshes = 0;

    const SEVERITY_COLOURS = {CRITICAL: "#ba2121", ERROR: "#e8710a", WARNING: "#d4b106"};
    const PALETTE = [
        "#417690", "#e8710a", "#2e8540", "#9c27b0", "#d4b106", "#0288d1",
        "#ba2121", "#6d4c41", "#00897b", "#5c6bc0", "#c2185b", "#7cb342",
    ];

    // --- Formatting -------------------------------------------------------------------------

    function text(value) {
        return value === null || value === undefined || value === "" ? "\u2013" : String(value);
    }

    function seconds(value) {
        if (value === null || value === undefined) {
            return "\u2013";
        }
        if (value < 1) {
            return Math.round(value * 1000) + " ms";
        }
        if (value < 120) {
            return value.toFixed(1) + " s";
        }
        if (value < 7200) {
            return Math.round(value / 60) + " min";
        }
        return (value / 3600).toFixed(1) + " h";
    }

    function money(value) {
        const amount = Number(value);
        if (!isFinite(amount)) {
            return "\u2013";
        }
        const digits = amount !== 0 && Math.abs(amount) < 1 ? 4 : 2;
        return "$" + amount.toLocaleString("en-US", {minimumFractionDigits: digits, maximumFractionDigits: digits});
    }

    function count(value) {
        return Number(value || 0).toLocaleString("en-US");
    }

    function when(iso) {
        // "12 s ago", "in 3.2 h"; a full UTC time beyond a day either way.
        if (!iso) {
            return "\u2013";
        }
        const moment = new Date(iso);
        const delta = (moment.getTime() - Date.now()) / 1000;
        const span = Math.abs(delta);
        if (span >= 86400) {
            return moment.toISOString().slice(0, 16).replace("T", " ") + " UTC";
        }
        let amount = Math.round(span) + " s";
        if (span >= 7200) {
            amount = (span / 3600).toFixed(1) + " h";
        } else if (span >= 60) {
            amount = Math.round(span / 60) + " min";
        }
        return delta <= 0 ? amount + " ago" : "in " + amount;
    }

    // --- DOM helpers --------------------------------------------------------------------------

    function el(tag, options, children) {
        const node = document.createElement(tag);
        const settings = options || {};
        if (settings.text !== undefined) {
            node.textContent = settings.text;
        }
        if (settings.className) {
            node.className = settings.className;
        }
        if (settings.href) {
            node.setAttribute("href", settings.href);
        }
        if (settings.title) {
            node.setAttribute("title", settings.title);
        }
        (children || []).forEach(function (child) {
            node.append(child);
        });
        return node;
    }

    function cell(value, className) {
        return el("td", {text: text(value), className: className});
    }

    function numberCell(value) {
        return el("td", {text: value, className: "ops-number"});
    }

    function linkCell(label, href, className) {
        return el("td", {className: className}, [el("a", {text: label, href: href})]);
    }

    function fillTable(id, rows) {
        const body = document.querySelector("#" + id + " tbody");
        body.replaceChildren.apply(body, rows);
    }

    function setText(id, value) {
        document.getElementById(id).textContent = value;
    }

    function show(id, visible, message) {
        const node = document.getElementById(id);
        node.hidden = !visible;
        if (message !== undefined) {
            node.textContent = message;
        }
    }

    // --- Charts ---------------------------------------------------------------------------------

    function themed() {
        const css = getComputedStyle(document.documentElement);
        Chart.defaults.color = css.getPropertyValue("--body-quiet-color").trim() || "#666";
        Chart.defaults.borderColor = css.getPropertyValue("--hairline-color").trim() || "#e8e8e8";
        Chart.defaults.font.family = getComputedStyle(document.body).fontFamily;
        Chart.defaults.animation = false;
        Chart.defaults.maintainAspectRatio = false;
        Chart.defaults.responsive = true;
    }

    function line(label, colour) {
        return {
            label: label, data: [], borderColor: colour, backgroundColor: colour,
            borderWidth: 1.5, pointRadius: 0, tension: 0.2,
        };
    }

    function makeCharts() {
        const minuteAxes = {
            x: {ticks: {maxRotation: 0, autoSkip: true, maxTicksLimit: 12}},
            y: {beginAtZero: true, ticks: {precision: 0}},
        };
        const interaction = {mode: "index", intersect: false};
        return {
            throughput: new Chart(document.getElementById("chart-throughput"), {
                type: "line",
                data: {labels: [], datasets: [line("attempts", "#417690"), line("jobs completed", "#2e8540")]},
                options: {scales: minuteAxes, interaction: interaction},
            }),
            failures: new Chart(document.getElementById("chart-failures"), {
                type: "line",
                data: {labels: [], datasets: [line("failed attempts", "#e8710a"), line("dead-lettered", "#ba2121")]},
                options: {scales: minuteAxes, interaction: interaction},
            }),
            timings: new Chart(document.getElementById("chart-timings"), {
                type: "bar",
                data: {
                    labels: [],
                    datasets: [
                        {label: "wait p50", data: [], backgroundColor: "#79aec8"},
                        {label: "wait p95", data: [], backgroundColor: "#417690"},
                        {label: "runtime p50", data: [], backgroundColor: "#a5d6a7"},
                        {label: "runtime p95", data: [], backgroundColor: "#2e8540"},
                    ],
                },
                options: {
                    scales: {y: {beginAtZero: true, title: {display: true, text: "seconds"}}},
                    interaction: interaction,
                },
            }),
            severity: new Chart(document.getElementById("chart-severity"), {
                type: "bar",
                data: {
                    labels: [],
                    datasets: [
                        {label: "dead-lettered in window", data: [], backgroundColor: []},
                        {label: "open in the DLQ", data: [], backgroundColor: "#9e9e9e"},
                    ],
                },
                options: {scales: {y: {beginAtZero: true, ticks: {precision: 0}}}},
            }),
            cost: new Chart(document.getElementById("chart-cost"), {
                type: "bar",
                data: {labels: [], datasets: []},
                options: {
                    scales: {
                        x: {stacked: true},
                        y: {stacked: true, beginAtZero: true, title: {display: true, text: "USD"}},
                    },
                    interaction: interaction,
                },
            }),
            budgets: new Chart(document.getElementById("chart-budgets"), {
                type: "bar",
                data: {labels: [], datasets: [{label: "% of the limit spent", data: [], backgroundColor: []}]},
                options: {
                    indexAxis: "y",
                    scales: {x: {beginAtZero: true, suggestedMax: 100, title: {display: true, text: "%"}}},
                    plugins: {legend: {display: false}},
                },
            }),
        };
    }

    // --- Panels -------------------------------------------------------------------------------

    function renderSummary(data) {
        const summary = data.summary;
        setText("summary-attempts", count(summary.attempts));
        setText("summary-completed", count(summary.completed_jobs));
        setText("summary-failed-attempts", count(summary.failed_attempts));
        setText("summary-dead-lettered", count(summary.dead_lettered));
        setText("summary-cost", money(summary.cost_usd));
        const workers = document.getElementById("summary-workers");
        workers.textContent = data.workers.available ? count(data.workers.workers.length) : "?";
        workers.classList.toggle("ops-bad", !data.workers.available || !data.workers.workers.length);
        const open = data.breakers.breakers.filter(function (b) { return b.state === "open"; });
        const breaker = document.getElementById("summary-breaker");
        breaker.textContent = !data.breakers.enabled ? "disabled" : open.length ? "open" : "closed";
        breaker.classList.toggle("ops-bad", open.length > 0);
    }

    function renderThroughput(charts, data) {
        const series = data.throughput;
        charts.throughput.data.labels = series.labels;
        charts.throughput.data.datasets[0].data = series.attempts;
        charts.throughput.data.datasets[1].data = series.completed_jobs;
        charts.throughput.update("none");
        charts.failures.data.labels = series.labels;
        charts.failures.data.datasets[0].data = series.failed_attempts;
        charts.failures.data.datasets[1].data = series.dead_lettered;
        charts.failures.update("none");
    }

    function renderTimings(charts, data) {
        const timings = data.timings;
        const chart = charts.timings;
        chart.data.labels = timings.map(function (t) { return t.queue; });
        chart.data.datasets[0].data = timings.map(function (t) { return t.wait.p50; });
        chart.data.datasets[1].data = timings.map(function (t) { return t.wait.p95; });
        chart.data.datasets[2].data = timings.map(function (t) { return t.runtime.p50; });
        chart.data.datasets[3].data = timings.map(function (t) { return t.runtime.p95; });
        chart.update("none");
        fillTable("timings-table", timings.map(function (t) {
            return el("tr", {}, [
                cell(t.queue),
                numberCell(seconds(t.wait.p50)),
                numberCell(seconds(t.wait.p95)),
                numberCell(seconds(t.runtime.p50)),
                numberCell(seconds(t.runtime.p95)),
                numberCell(seconds(t.runtime.max)),
                numberCell(t.measured ? count(t.samples) : "\u2013"),
                cell(t.measured ? t.source : "not measured: " + t.source, t.measured ? "" : "ops-bad"),
            ]);
        }));
    }

    function renderSeverity(charts, data) {
        const failures = data.failures;
        const chart = charts.severity;
        chart.data.labels = failures.severities;
        chart.data.datasets[0].data = failures.in_window;
        chart.data.datasets[0].backgroundColor = failures.severities.map(function (s) { return SEVERITY_COLOURS[s] || "#999"; });
        chart.data.datasets[1].data = failures.open;
        chart.update("none");
        fillTable("severity-table", failures.severities.map(function (severity, n) {
            return el("tr", {}, [
                cell(severity, "ops-severity-" + severity),
                numberCell(count(failures.in_window[n])),
                linkCell(count(failures.open[n]), failures.open_urls[n], "ops-number"),
            ]);
        }));
    }

    function renderCost(charts, data) {
        const cost = data.cost_per_day;
        const chart = charts.cost;
        chart.data.labels = cost.days.map(function (day) { return day.slice(5); });
        chart.data.datasets = cost.features.map(function (feature, n) {
            return {
                label: feature.feature,
                data: feature.cost_usd.map(Number),
                backgroundColor: PALETTE[n % PALETTE.length],
                stack: "cost",
            };
        });
        chart.update("none");
        setText("cost-total", money(cost.total_usd));
    }

    function renderDeadlines(data) {
        const rows = data.deadlines || [];
        show("deadlines-empty", rows.length === 0);
        fillTable("deadlines-table", rows.map(function (d) {
            return el("tr", {}, [
                cell(d.feature),
                numberCell(count(d.with_deadline)),
                numberCell(count(d.met)),
                numberCell((d.ratio * 100).toFixed(1) + " %"),
            ]);
        }));
    }

    function renderKeys(data) {
        const keys = data.spend_by_key;
        show("keys-empty", keys.length === 0);
        fillTable("keys-table", keys.map(function (k) {
            return el("tr", {}, [
                k.url ? linkCell(k.key, k.url) : cell(k.key),
                cell(k.user || "\u2013"),
                cell(k.scopes.join(", ")),
                numberCell(count(k.jobs)),
                numberCell(money(k.cost_usd)),
                numberCell(money(k.today_usd)),
                cell(k.state),
            ]);
        }));
    }

    function budgetColour(budget) {
        if (budget.exhausted || budget.percent_used >= 100) {
            return "#ba2121";
        }
        return budget.percent_used >= budget.soft_alert_percent ? "#e8710a" : "#2e8540";
    }

    function renderBudgets(charts, data) {
        const budgets = data.budgets;
        const chart = charts.budgets;
        chart.data.labels = budgets.map(function (b) { return b.name + " (" + b.period + ")"; });
        chart.data.datasets[0].data = budgets.map(function (b) { return b.percent_used; });
        chart.data.datasets[0].backgroundColor = budgets.map(budgetColour);
        chart.update("none");
        show("budgets-empty", budgets.length === 0);
        fillTable("budgets-table", budgets.map(function (b) {
            return el("tr", {}, [
                linkCell(b.name, b.url),
                cell(b.period),
                numberCell(money(b.spent_usd)),
                numberCell(money(b.reserved_usd)),
                numberCell(money(b.limit_usd)),
                el("td", {
                    text: b.percent_used.toFixed(1) + " %" + (b.exhausted ? " (exhausted)" : ""),
                    className: "ops-number" + (b.exhausted ? " ops-bad" : ""),
                }),
                numberCell(money(b.projected_spend_usd)),
                cell(b.projected_exhaustion_at ? when(b.projected_exhaustion_at) : "not this window"),
            ]);
        }));
    }

    function renderQueues(data) {
        const queues = data.queues;
        show("queues-unavailable", !queues.available, queues.error || "");
        fillTable("queues-table", queues.queues.map(function (q) {
            const late = q.threshold_seconds && q.oldest_wait_seconds > q.threshold_seconds;
            return el("tr", {}, [
                cell(q.name),
                numberCell(count(q.waiting)),
                el("td", {
                    text: seconds(q.oldest_wait_seconds),
                    className: "ops-number" + (late ? " ops-bad" : ""),
                    title: q.threshold_seconds ? "alert threshold " + q.threshold_seconds + " s" : "",
                }),
                numberCell(count(q.scheduled)),
                numberCell(count(q.running)),
                numberCell(count(q.failed_in_rq)),
                el("td", {text: count(q.workers), className: "ops-number" + (q.workers ? "" : " ops-bad")}),
            ]);
        }));
        const rows = queues.jobs_in_database;
        setText("jobs-in-database",
            count(rows.queued) + " queued, " + count(rows.retrying) + " retrying, " + count(rows.running) + " running");
    }

    function renderWorkers(data) {
        const workers = data.workers;
        show("workers-unavailable", !workers.available, workers.error || "");
        show("workers-empty", workers.available && workers.workers.length === 0);
        // One line per job in flight: a threaded worker runs up to w.concurrency at once.
        function runningJob(job) {
            if (job.llm_job) {
                const llm = job.llm_job;
                return el("div", {className: "ops-running-job"}, [
                    el("a", {text: llm.feature + "/" + llm.model + " " + llm.id.slice(0, 8), href: llm.url, title: llm.id}),
                    document.createTextNode(", attempt " + llm.attempts + ", started " + when(job.started_at)),
                ]);
            }
            return el("div", {className: "ops-running-job", text: text(job.description) + " (" + job.rq_job_id.slice(0, 8) + ")"});
        }
        fillTable("workers-table", workers.workers.map(function (w) {
            const jobs = w.running || (w.current ? [w.current] : []);
            let running = el("td", {text: "idle"});
            if (jobs.length) {
                const heading = (w.concurrency || 1) > 1 ? [el("div", {text: jobs.length + " of " + w.concurrency + " at once"})] : [];
                running = el("td", {}, heading.concat(jobs.map(runningJob)));
            }
            return el("tr", {}, [
                el("td", {text: w.label || w.name, title: "rq worker " + w.name, className: "ops-worker"}),
                cell(w.queues.join(", ")),
                cell(w.state),
                running,
                cell(when(w.last_heartbeat)),
                numberCell(count(w.successful_jobs) + " / " + count(w.failed_jobs)),
            ]);
        }));
    }

    function renderBreakers(data) {
        const box = document.getElementById("breakers");
        const breakers = data.breakers;
        const parts = [];
        if (!breakers.enabled) {
            parts.push(el("p", {text: "Disabled (LLM_BREAKER_ENABLED is off): no account-wide failure stops dispatch."}));
        }
        if (!breakers.breakers.length) {
            parts.push(el("p", {className: "ops-breaker", text: "Closed: no account-wide failure has ever opened it."}));
        }
        breakers.breakers.forEach(function (b) {
            const open = b.state === "open";
            const details = open
                ? "Opened " + when(b.opened_at) + " by " + text(b.reason_code) + "; next probe " +
                  (b.next_probe_at ? when(b.next_probe_at) : "\u2013") + ", " + b.probes + " probes so far."
                : "Dispatching normally.";
            parts.push(el("div", {className: "ops-breaker"}, [
                el("a", {href: b.url}, [
                    el("span", {text: b.provider + ": " + b.state, className: "ops-breaker-state" + (open ? " ops-bad" : "")}),
                ]),
                el("p", {text: details}),
            ]));
        });
        parts.push(el("p", {}, [el("a", {text: "All breakers", href: breakers.list_url})]));
        box.replaceChildren.apply(box, parts);
    }

    function renderPaused(data) {
        const rows = [];
        data.paused.features.forEach(function (p) { rows.push(["feature " + p.name, p]); });
        data.paused.providers.forEach(function (p) { rows.push(["provider " + p.name, p]); });
        show("paused-empty", rows.length === 0);
        fillTable("paused-table", rows.map(function (row) {
            return el("tr", {}, [linkCell(row[0], row[1].url), numberCell(count(row[1].waiting))]);
        }));
    }

    function renderRecentFailures(data) {
        const recent = data.recent_failures;
        document.getElementById("dlq-link").setAttribute("href", recent.dlq_url);
        show("failures-empty", recent.records.length === 0);
        fillTable("failures-table", recent.records.map(function (r) {
            return el("tr", {}, [
                linkCell(when(r.created_at), r.url),
                cell(r.severity, "ops-severity-" + r.severity),
                cell(r.reason_code),
                cell(r.feature + " / " + r.model),
                numberCell(count(r.attempts)),
                cell(r.state),
                linkCell(r.job_id.slice(0, 8), r.job_url),
            ]);
        }));
    }

    // --- Refresh loop -------------------------------------------------------------------------

    let charts = null;

    function render(data) {
        charts = charts || makeCharts();
        renderSummary(data);
        renderThroughput(charts, data);
        renderTimings(charts, data);
        renderSeverity(charts, data);
        renderCost(charts, data);
        renderKeys(data);
        renderDeadlines(data);
        renderBudgets(charts, data);
        renderQueues(data);
        renderWorkers(data);
        renderBreakers(data);
        renderPaused(data);
        renderRecentFailures(data);
    }

    function schedule() {
        window.clearTimeout(timer);
        timer = window.setTimeout(refresh, refreshMs);
    }

    function stale(message) {
        status.classList.add("ops-stale");
        status.textContent = message + (lastSuccess ? "; showing the numbers of " + lastSuccess + "." : ".");
    }

    function refresh() {
        if (document.hidden) {
            // Nobody looks: ask again once the tab is visible (visibilitychange below).
            return;
        }
        if (inFlight) {
            inFlight.abort();
        }
        const controller = new AbortController();
        inFlight = controller;
        const abortLater = window.setTimeout(function () { controller.abort(); }, refreshMs);
        fetch(dataUrl + "?hours=" + encodeURIComponent(hours), {
            credentials: "same-origin",
            headers: {Accept: "application/json"},
            redirect: "manual",
            signal: controller.signal,
        }).then(function (response) {
            if (response.type === "opaqueredirect") {
                throw new Error("signed out: reload the page to sign in again");
            }
            if (!response.ok) {
                throw new Error("HTTP " + response.status);
            }
            return response.json();
        }).then(function (data) {
            render(data);
            refreshes += 1;
            lastSuccess = new Date(data.generated_at).toISOString().slice(11, 19) + " UTC";
            root.dataset.refreshes = String(refreshes);
            status.classList.remove("ops-stale");
            status.textContent = "Updated " + lastSuccess + "; refreshes every " + refreshMs / 1000 + " s.";
            schedule();
        }).catch(function (error) {
            if (controller.signal.aborted && inFlight !== controller) {
                return;  // replaced by a newer request
            }
            stale("Could not refresh (" + error.message + ")");
            if (!/signed out/.test(error.message)) {
                schedule();
            }
        }).finally(function () {
            window.clearTimeout(abortLater);
            if (inFlight === controller) {
                inFlight = null;
            }
        });
    }

    document.getElementById("ops-window").addEventListener("change", function (event) {
        hours = Number(event.target.value);
        const url = new URL(window.location.href);
        url.searchParams.set("hours", String(hours));
        window.history.replaceState(null, "", url);
        refresh();
    });

    document.addEventListener("visibilitychange", function () {
        if (!document.hidden) {
            refresh();
        }
    });

    themed();
    refresh();
}());
