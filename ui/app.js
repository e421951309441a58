// tickler's dashboard: one script, no dependencies, no build step.
//
// Every view is drawn from the /v1 API with the operator's bearer token,
// which is kept in sessionStorage (gone when the tab closes) and sent only
// to this origin. Nothing from the API is ever parsed as HTML: the DOM is
// built with createElement and textContent, because keys, payloads, headers
// and errors are written by clients and must not run as script here.
//
// Views are hash routes, so a page can be linked and reloaded:
//   #/              overview: /v1/stats, overdue and dead jobs
//   #/jobs          lookup by id or topic + key; with ?topic=…&status=… a listing
//   #/jobs/{id}     one job and its history
//   #/bulk          bulk changes: preview (dry run), apply, progress
//   #/bulk/{id}     the progress of one bulk operation
//   #/schedules     every schedule, with pause and resume
//   #/topics        paused and paced topics; pause or open a topic by name
//   #/topics/{name} one topic (URL-encoded): its state and pace, and what falls
//                   due on it ahead, against the pace (?span=…); read scope only
//   #/forecast      what falls due ahead, by topic (?topic=…&span=…)
//   #/audit         who changed the rules, newest first (?action=…&actor=…)
// Elements tests look for carry ids or data-* attributes (data-action,
// data-job, data-topic, data-status); keep them stable.

'use strict';

(function () {
  const TOKEN_KEY = 'tickler.token';
  const STATUSES = ['pending', 'dispatching', 'dispatched', 'succeeded', 'dead', 'cancelled', 'expired'];
  const REFRESH_MS = 5000;
  const BULK_POLL_MS = 1000;
  const PAGE = 50;

  // Each render bumps `generation`; async work started for an older view
  // checks it and drops its result instead of drawing into the new one.
  let generation = 0;
  const timers = new Set();

  // ---------------------------------------------------------------------
  // DOM

  /** h('td', {class: 'num', 'data-job': 7, onclick: f}, 'text', child, …) */
  function h(tag, attrs, ...children) {
    return build(document.createElement(tag), attrs, children);
  }

  const SVG_NS = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs, ...children) {
    return build(document.createElementNS(SVG_NS, tag), attrs, children);
  }

  function build(el, attrs, children) {
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name.startsWith('on') && typeof value === 'function') {
        el.addEventListener(name.slice(2), value);
      } else if (name === 'class') {
        el.setAttribute('class', value);
      } else if (name in el && !(el instanceof SVGElement) && typeof value !== 'string') {
        el[name] = value; // properties such as disabled, value, max
      } else {
        el.setAttribute(name, value === true ? '' : String(value));
      }
    }
    append(el, children);
    return el;
  }

  function append(el, ...children) {
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      if (Array.isArray(child)) append(el, ...child);
      else el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }

  function clear(el) {
    while (el.firstChild) el.removeChild(el.firstChild);
    return el;
  }

  function $(selector, root) {
    return (root || document).querySelector(selector);
  }

  // ---------------------------------------------------------------------
  // Formatting

  /** `2030-01-31T09:00:00.000Z` → `2030-01-31 09:00:00.000Z` (UTC as sent). */
  function timeText(iso) {
    if (!iso) return '—';
    return String(iso).replace('T', ' ');
  }

  /** Milliseconds as people read them: 850 ms, 12.3 s, 4m 05s, 2h 03m, 3d 4h. */
  function duration(ms) {
    if (ms === null || ms === undefined || Number.isNaN(ms)) return '—';
    const sign = ms < 0 ? '-' : '';
    ms = Math.abs(ms);
    if (ms < 1000) return sign + Math.round(ms) + ' ms';
    const s = ms / 1000;
    if (s < 60) return sign + s.toFixed(s < 10 ? 2 : 1) + ' s';
    const m = Math.floor(s / 60);
    if (m < 60) return sign + m + 'm ' + String(Math.floor(s % 60)).padStart(2, '0') + 's';
    const hours = Math.floor(m / 60);
    if (hours < 48) return sign + hours + 'h ' + String(m % 60).padStart(2, '0') + 'm';
    return sign + Math.floor(hours / 24) + 'd ' + (hours % 24) + 'h';
  }

  /** "in 5m 00s" / "3m 10s ago", against this browser's clock. */
  function relative(iso) {
    const at = Date.parse(iso);
    if (Number.isNaN(at)) return '';
    const delta = at - Date.now();
    return delta >= 0 ? 'in ' + duration(delta) : duration(-delta) + ' ago';
  }

  function timeCell(iso, cls) {
    return h('td', {class: 'time ' + (cls || ''), title: iso || ''}, timeText(iso));
  }

  function statusBadge(status) {
    return h('span', {class: 'status status-' + status, 'data-status': status}, status);
  }

  function count(n) {
    return n === null || n === undefined ? '—' : Number(n).toLocaleString('en-US');
  }

  function jobLink(id) {
    return h('a', {href: '#/jobs/' + id, 'data-job-link': id}, String(id));
  }

  // ---------------------------------------------------------------------
  // The API

  class ApiError extends Error {
    constructor(status, code, message, body) {
      super(code + ': ' + message);
      this.status = status;
      this.code = code;
      this.detail = message;
      this.body = body;
    }
  }

  function tokenGet() {
    try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch (_) { return ''; }
  }
  function tokenSet(secret) {
    try { sessionStorage.setItem(TOKEN_KEY, secret); } catch (_) { /* private mode */ }
  }
  function tokenClear() {
    try { sessionStorage.removeItem(TOKEN_KEY); } catch (_) { /* private mode */ }
  }

  /**
   * One API call. Resolves to {status, data}; rejects with an ApiError
   * whose message is `code: message` from the error body. A 401 also
   * brings up the sign-in form.
   */
  async function api(method, path, body) {
    const headers = {accept: 'application/json'};
    const token = tokenGet();
    if (token) headers.authorization = 'Bearer ' + token;
    const init = {method, headers, cache: 'no-store'};
    // tickler wants this content type on every POST and PATCH, even
    // without a body (its guard against cross-site form posts).
    if (method === 'POST' || method === 'PATCH') {
      headers['content-type'] = 'application/json';
      init.body = JSON.stringify(body === undefined ? {} : body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (err) {
      throw new ApiError(0, 'network', 'tickler did not answer (' + err.message + ')', null);
    }
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
    if (!response.ok) {
      const error = data && data.error;
      const err = new ApiError(
        response.status,
        (error && error.code) || 'http_' + response.status,
        (error && error.message) || text.slice(0, 300) || response.statusText,
        data,
      );
      if (response.status === 401) signinNeeded(err);
      throw err;
    }
    return {status: response.status, data};
  }

  function query(params) {
    const parts = [];
    for (const [name, value] of Object.entries(params)) {
      if (value === null || value === undefined || value === '') continue;
      parts.push(encodeURIComponent(name) + '=' + encodeURIComponent(value));
    }
    return parts.length ? '?' + parts.join('&') : '';
  }

  function errorText(err) {
    return err instanceof ApiError ? err.message : 'error: ' + (err && err.message ? err.message : err);
  }

  // ---------------------------------------------------------------------
  // Messages

  let flashTimer = null;

  /** A message under the header; errors stay until closed or replaced. */
  function flash(kind, text) {
    const el = $('#flash');
    clearTimeout(flashTimer);
    clear(el);
    el.className = 'flash ' + kind;
    el.dataset.kind = kind;
    append(el, [
      h('span', {class: 'text'}, text),
      h('button', {type: 'button', class: 'small', title: 'Dismiss', onclick: flashClear}, '×'),
    ]);
    el.hidden = false;
    if (kind === 'info') flashTimer = setTimeout(flashClear, 8000);
  }

  function flashClear() {
    const el = $('#flash');
    el.hidden = true;
    clear(el);
  }

  function flashError(err) {
    flash('error', errorText(err));
  }

  // ---------------------------------------------------------------------
  // Signing in

  let signinShown = false;

  function authDraw() {
    const el = clear($('#auth'));
    const token = tokenGet();
    if (token) {
      append(el, [
        h('span', {class: 'who', title: 'A token is kept for this tab'}, 'token …' + token.slice(-4)),
        h('button', {type: 'button', id: 'signout', class: 'small', onclick: signOut}, 'Sign out'),
      ]);
    } else {
      append(el, [
        h('span', {class: 'who'}, 'no token'),
        h('button', {type: 'button', id: 'signin-open', class: 'small', onclick: () => signinDraw(null)}, 'Sign in'),
      ]);
    }
  }

  function signOut() {
    tokenClear();
    authDraw();
    flash('info', 'signed out: the token is no longer kept in this tab');
    render();
  }

  /**
   * A 401 anywhere: no token yet (just ask for one), or the token was
   * refused (unknown or revoked: forget it and say so).
   */
  function signinNeeded(err) {
    if (signinShown) return;
    if (tokenGet()) {
      tokenClear();
      authDraw();
      signinDraw(err);
    } else {
      signinDraw(null);
    }
  }

  function signinDraw(err) {
    generation += 1;
    timersStop();
    signinShown = true;
    const input = h('input', {
      id: 'token', name: 'token', type: 'password', autocomplete: 'off', spellcheck: 'false',
      placeholder: 'tkl_…', 'aria-label': 'Token secret', required: true,
    });
    const problem = h('div', {class: 'error-line', id: 'signin-error'}, err ? err.message : '');
    const form = h('form', {id: 'signin-form', onsubmit: signinSubmit},
      input, h('button', {type: 'submit', id: 'signin', class: 'primary'}, 'Sign in'));
    const view = clear($('#view'));
    append(view, h('section', {class: 'panel signin'},
      h('div', {class: 'panel-head'}, h('h2', null, 'Sign in')),
      h('p', {class: 'muted'},
        'Paste the secret of a tickler API token, as printed by ',
        h('code', null, 'tickler token create NAME --topics \'*\' --scope admin'), '. ',
        'A token with read shows jobs, write also cancels them, admin also redrives. ',
        'It is kept in this tab only (sessionStorage) and sent only to this server.'),
      form, problem));
    if (err) flash('error', err.message);
    input.focus();
  }

  async function signinSubmit(event) {
    event.preventDefault();
    const secret = $('#token').value.trim();
    if (!secret) return;
    tokenSet(secret);
    const button = $('#signin');
    button.disabled = true;
    try {
      // Any read shows whether the secret is known; stats may not exist.
      await api('GET', '/v1/jobs' + query({limit: 1}));
    } catch (err) {
      if (err.status === 401) {
        tokenClear();
        authDraw();
        signinShown = false;
        signinDraw(err);
        return;
      }
      // Known, but perhaps without read: the views will say what it lacks.
    }
    signinShown = false;
    authDraw();
    flashClear();
    render();
  }

  // ---------------------------------------------------------------------
  // Routing

  function timersStop() {
    for (const t of timers) clearTimeout(t);
    timers.clear();
  }

  /**
   * Runs `fn` now and then `ms` after each run finishes, while this view
   * lives (paused while the tab is hidden); `fn` returning false stops it.
   */
  function every(ms, gen, fn) {
    const tick = async () => {
      if (gen !== generation) return;
      if (!document.hidden) {
        let more = true;
        try { more = await fn(); } catch (_) { /* each view shows its own errors */ }
        if (more === false) return;
      }
      if (gen !== generation) return;
      const t = setTimeout(() => { timers.delete(t); tick(); }, ms);
      timers.add(t);
    };
    return tick();
  }

  function routeParse() {
    const hash = location.hash.replace(/^#/, '') || '/';
    const [path, search] = hash.split('?');
    const params = new URLSearchParams(search || '');
    const parts = path.split('/').filter(Boolean);
    return {parts, params};
  }

  function render() {
    generation += 1;
    timersStop();
    signinShown = false;
    const gen = generation;
    const {parts, params} = routeParse();
    const view = clear($('#view'));
    let nav = 'overview';
    if (parts.length === 0) {
      viewOverview(view, gen);
    } else if (parts[0] === 'jobs' && parts.length === 1) {
      nav = 'jobs';
      viewJobs(view, gen, params);
    } else if (parts[0] === 'jobs' && parts.length === 2) {
      nav = 'jobs';
      viewJob(view, gen, parts[1]);
    } else if (parts[0] === 'bulk' && parts.length <= 2) {
      nav = 'bulk';
      viewBulk(view, gen, parts[1] || null);
    } else if (parts[0] === 'schedules' && parts.length === 1) {
      nav = 'schedules';
      viewSchedules(view, gen);
    } else if (parts[0] === 'topics' && parts.length === 1) {
      nav = 'topics';
      viewTopics(view, gen);
    } else if (parts[0] === 'topics' && parts.length === 2) {
      nav = 'topics';
      viewTopic(view, gen, parts[1], params);
    } else if (parts[0] === 'forecast' && parts.length === 1) {
      nav = 'forecast';
      viewForecast(view, gen, params);
    } else if (parts[0] === 'audit' && parts.length === 1) {
      nav = 'audit';
      viewAudit(view, gen, params);
    } else {
      nav = '';
      append(view, h('p', {class: 'notice'}, 'No such page: #' + parts.join('/') + '. ',
        h('a', {href: '#/'}, 'Overview')));
    }
    for (const a of document.querySelectorAll('#nav a')) {
      a.classList.toggle('active', a.dataset.nav === nav);
    }
  }

  // ---------------------------------------------------------------------
  // Job actions (overview, listings, job page)

  /** Cancel or redrive job `id` after a confirm(); then `after()`. */
  async function jobAction(action, id, button, after) {
    const question = action === 'redrive'
      ? 'Redrive dead job ' + id + '? It becomes pending now, with fresh attempts.'
      : 'Cancel job ' + id + '? It will never be produced.';
    if (!window.confirm(question)) return;
    if (button) button.disabled = true;
    try {
      if (action === 'redrive') {
        await api('POST', '/v1/jobs/' + id + '/redrive', {});
        flash('info', 'job ' + id + ' redriven: pending again');
      } else {
        await api('DELETE', '/v1/jobs/' + id);
        flash('info', 'job ' + id + ' cancelled');
      }
    } catch (err) {
      flashError(err);
      if (button) button.disabled = false;
    }
    if (after) await after();
  }

  function actionButton(action, job, after) {
    const label = action === 'redrive' ? 'Redrive' : 'Cancel';
    const button = h('button', {
      type: 'button',
      class: 'small ' + (action === 'cancel' ? 'danger' : ''),
      'data-action': action,
      'data-job': job.id,
      title: label + ' job ' + job.id,
    }, label);
    button.addEventListener('click', () => jobAction(action, job.id, button, after));
    return button;
  }

  /** The action that fits a job's status, if any. */
  function actionFor(job) {
    if (job.status === 'dead') return 'redrive';
    if (job.status === 'pending') return 'cancel';
    return null;
  }

  // ---------------------------------------------------------------------
  // Job listings with paging (GET /v1/jobs)

  /**
   * A table of jobs from GET /v1/jobs with `params`, `columns` of
   * [heading, job => cell]. It is redrawn only when the jobs change, so a
   * refresh does not take a button from under the pointer; "More" follows
   * next_cursor, and refreshes then fetch as many jobs as are shown.
   */
  function jobTable(id, params, columns, emptyText) {
    const box = h('div', {class: 'table-wrap'});
    const problem = h('div', {class: 'error-line'});
    const moreButton = h('button', {type: 'button', class: 'small more', hidden: true}, 'More');
    const table = {el: h('div', null, problem, box, moreButton), jobs: [], cursor: null, limit: PAGE, signature: null};

    function draw() {
      const signature = JSON.stringify(table.jobs.map((job) => [job.id, job.version, job.status])) + table.cursor;
      if (signature === table.signature) return;
      table.signature = signature;
      clear(box);
      if (table.jobs.length === 0) {
        append(box, h('div', {class: 'empty', id: id + '-empty'}, emptyText));
      } else {
        append(box, h('table', {id},
          h('thead', null, h('tr', null, columns.map(([heading, , cls]) => h('th', {class: cls || ''}, heading)))),
          h('tbody', null, table.jobs.map((job) =>
            h('tr', {'data-job': job.id, 'data-status': job.status},
              columns.map(([, cell]) => cell(job)))))));
      }
      moreButton.hidden = !table.cursor;
    }

    table.refresh = async function () {
      const p = typeof params === 'function' ? params() : params;
      try {
        const {data} = await api('GET', '/v1/jobs' + query({...p, limit: Math.min(table.limit, 1000)}));
        table.jobs = data.jobs || [];
        table.cursor = data.next_cursor || null;
        problem.textContent = '';
        draw();
      } catch (err) {
        problem.textContent = errorText(err);
      }
    };

    moreButton.addEventListener('click', async () => {
      if (!table.cursor) return;
      moreButton.disabled = true;
      const p = typeof params === 'function' ? params() : params;
      try {
        const {data} = await api('GET', '/v1/jobs' + query({...p, limit: PAGE, cursor: table.cursor}));
        table.jobs = table.jobs.concat(data.jobs || []);
        table.cursor = data.next_cursor || null;
        table.limit = table.jobs.length;
        problem.textContent = '';
        draw();
      } catch (err) {
        problem.textContent = errorText(err);
      }
      moreButton.disabled = false;
    });
    return table;
  }

  const col = {
    id: ['id', (job) => h('td', {class: 'num'}, jobLink(job.id)), 'num'],
    topic: ['topic', (job) => h('td', {class: 'mono'}, h('span', {class: 'trunc', title: job.topic}, job.topic))],
    key: ['key', (job) => h('td', {class: 'mono'}, job.key === null || job.key === undefined
      ? h('span', {class: 'muted'}, '—') : h('span', {class: 'trunc', title: job.key}, job.key))],
    status: ['status', (job) => h('td', null, statusBadge(job.status))],
    runAt: ['run at (UTC)', (job) => timeCell(job.run_at)],
    attempt: ['attempt', (job) => h('td', {class: 'num'}, job.attempt + ' / ' + job.max_attempts), 'num'],
    updated: ['updated (UTC)', (job) => timeCell(job.updated_at)],
  };

  function actionsColumn(after) {
    return ['', (job) => {
      const action = actionFor(job);
      return h('td', {class: 'actions'}, action ? actionButton(action, job, after) : null);
    }];
  }

  // ---------------------------------------------------------------------
  // #/ — overview

  function viewOverview(view, gen) {
    const statsBox = h('div', {id: 'stats-body'});
    const statsProblem = h('div', {class: 'error-line', id: 'stats-error'});
    const asOf = h('span', {class: 'meta', id: 'stats-at'});

    let refreshAll = null;
    const after = () => refreshAll && refreshAll();
    const overdue = jobTable('overdue',
      () => ({status: 'pending', run_at_to: new Date().toISOString()}),
      [col.id, col.topic, col.key, col.runAt,
        ['late by', (job) => h('td', {class: 'num err', 'data-late': job.run_at}, lateBy(job.run_at)), 'num'],
        col.attempt, actionsColumn(after)],
      'No overdue jobs.');
    const dead = jobTable('dead', {status: 'dead'},
      [col.id, col.topic, col.key, col.attempt,
        ['last error', (job) => h('td', {class: 'wrap err mono'}, job.last_error || '—')],
        col.updated, actionsColumn(after)],
      'No dead jobs.');

    append(view,
      h('section', {class: 'panel', id: 'stats'},
        h('div', {class: 'panel-head'}, h('h2', null, 'Overview'), h('span', {class: 'spacer'}), asOf),
        statsProblem, statsBox),
      h('div', {class: 'grid-tables'},
        h('section', {class: 'panel', id: 'overdue-panel'},
          h('div', {class: 'panel-head'}, h('h2', null, 'Overdue jobs'),
            h('span', {class: 'meta'}, 'pending with run_at before now')),
          overdue.el),
        h('section', {class: 'panel', id: 'dead-panel'},
          h('div', {class: 'panel-head'}, h('h2', null, 'Dead jobs'),
            h('span', {class: 'meta'}, 'out of attempts, or failed by their consumer')),
          dead.el)));

    let statsMissing = false;
    async function statsRefresh() {
      if (statsMissing) return;
      try {
        const {data} = await api('GET', '/v1/stats');
        if (gen !== generation) return;
        statsProblem.textContent = '';
        asOf.textContent = 'as of ' + timeText(data.at) + ' · scan ' + duration(data.scan_ms) + ' · every 5 s';
        statsDraw(clear(statsBox), data);
      } catch (err) {
        if (gen !== generation) return;
        if (err.status === 404) {
          // A tickler older than /v1/stats: the job tables still work.
          statsMissing = true;
          clear(statsBox);
          append(statsBox, h('p', {class: 'notice', id: 'stats-missing'},
            'Statistics are not available from this server (' + err.message + '). ' +
            'The job tables below still work.'));
        } else {
          statsProblem.textContent = errorText(err);
        }
      }
    }

    // Rows are redrawn only when the jobs change; how late they are, each time.
    const lateUpdate = () => {
      for (const td of view.querySelectorAll('td[data-late]')) td.textContent = lateBy(td.dataset.late);
    };
    refreshAll = () => Promise.all([statsRefresh(), overdue.refresh().then(lateUpdate), dead.refresh()]);
    every(REFRESH_MS, gen, refreshAll);
  }

  function lateBy(runAt) {
    return duration(Date.now() - Date.parse(runAt));
  }

  function card(label, value, sub, tone, id) {
    return h('div', {class: 'card ' + (tone || ''), id: id || null},
      h('div', {class: 'label'}, label),
      h('div', {class: 'value'}, value),
      h('div', {class: 'sub'}, sub || '\u00a0'));
  }

  // The calling token's quota: the fuller of its two, as "used of most".
  function quotaCard(quota) {
    const parts = [];
    let fullest = 0;
    if (quota.max_pending_jobs !== null && quota.max_pending_jobs !== undefined) {
      parts.push(count(quota.pending_jobs) + ' of ' + count(quota.max_pending_jobs) + ' jobs');
      fullest = Math.max(fullest, quota.pending_jobs / Math.max(quota.max_pending_jobs, 1));
    }
    if (quota.max_payload_bytes !== null && quota.max_payload_bytes !== undefined) {
      parts.push(count(quota.payload_bytes) + ' of ' + count(quota.max_payload_bytes) + ' bytes');
      fullest = Math.max(fullest, quota.payload_bytes / Math.max(quota.max_payload_bytes, 1));
    }
    return card('quota of ' + quota.token, Math.round(fullest * 100) + ' %', parts.join(' · '),
      fullest >= 1 ? 'bad' : fullest >= 0.8 ? 'warn' : '', 'card-quota');
  }

  function statsDraw(box, stats) {
    const jobs = stats.jobs || [];
    const byStatus = {};
    for (const row of jobs) byStatus[row.status] = (byStatus[row.status] || 0) + Number(row.count);
    const overdue = stats.overdue || {};
    const window_ = stats.window || {};
    const instances = stats.instances || {};
    const drift = window_.drift;
    append(box, h('div', {class: 'cards'},
      card('pending', count(byStatus.pending || 0), count(byStatus.dispatching || 0) + ' dispatching', '', 'card-pending'),
      card('overdue', count(overdue.count),
        overdue.count ? 'oldest ' + duration(overdue.oldest_age_ms) : 'none late',
        overdue.count ? 'bad' : '', 'card-overdue'),
      card('next due', stats.next_due_in_ms === null || stats.next_due_in_ms === undefined
        ? 'none' : 'in ' + duration(stats.next_due_in_ms), 'earliest pending job', '', 'card-next'),
      card('window drift', count(drift),
        'MySQL ' + count(window_.mysql) + ' · Redis ' + count(window_.redis),
        drift ? 'warn' : '', 'card-window'),
      card('instances', count(instances.live), count(instances.dispatchers) + (instances.dispatchers === 1 ? ' dispatcher' : ' dispatchers'),
        instances.dispatchers === 0 ? 'bad' : '', 'card-instances'),
      card('dead', count(byStatus.dead || 0), 'redrive below', byStatus.dead ? 'warn' : '', 'card-dead'),
      card('results lag', stats.results_lag === null || stats.results_lag === undefined ? '—' : count(stats.results_lag),
        'reports not yet read', stats.results_lag ? 'warn' : '', 'card-lag'),
      stats.quota ? quotaCard(stats.quota) : null));

    append(box, h('div', {class: 'grid-stats'},
      h('div', null, h('div', {class: 'sub-head'}, 'Jobs by topic and status'), countsTable(jobs)),
      h('div', null,
        h('div', {class: 'sub-head'}, 'Lateness per minute (dispatched − run_at)'),
        latenessChart(stats.lateness || []))));
  }

  function countsTable(rows) {
    const topics = new Map();
    for (const row of rows) {
      if (!topics.has(row.topic)) topics.set(row.topic, {});
      const t = topics.get(row.topic);
      t[row.status] = (t[row.status] || 0) + Number(row.count);
    }
    if (topics.size === 0) return h('div', {class: 'empty', id: 'counts-empty'}, 'No jobs.');
    const names = [...topics.keys()].sort();
    const totals = {};
    const cell = (topic, status, n) => h('td', {
      class: 'num' + (n ? '' : ' zero'), 'data-topic': topic, 'data-status': status,
    }, count(n || 0));
    const link = (topic) => h('a', {class: 'trunc', href: '#/jobs' + query({topic}), title: topic}, topic);
    return h('div', {class: 'table-wrap'}, h('table', {id: 'counts'},
      h('thead', null, h('tr', null, h('th', null, 'topic'),
        STATUSES.map((s) => h('th', {class: 'num'}, s)), h('th', {class: 'num'}, 'all'))),
      h('tbody', null, names.map((topic) => {
        const t = topics.get(topic);
        let all = 0;
        const cells = STATUSES.map((s) => {
          all += t[s] || 0;
          totals[s] = (totals[s] || 0) + (t[s] || 0);
          return cell(topic, s, t[s]);
        });
        return h('tr', {'data-topic': topic}, h('td', {class: 'mono'}, link(topic)), cells,
          h('td', {class: 'num', 'data-topic': topic, 'data-status': 'all'}, count(all)));
      })),
      names.length > 1 ? h('tfoot', null, h('tr', null, h('td', null, 'all topics'),
        STATUSES.map((s) => h('td', {class: 'num' + (totals[s] ? '' : ' zero')}, count(totals[s] || 0))),
        h('td', {class: 'num'}, count(Object.values(totals).reduce((a, b) => a + b, 0))))) : null));
  }

  /** p50 and p99 lines over per-minute job counts, in plain SVG. */
  function latenessChart(points) {
    const legend = h('div', {class: 'legend'},
      h('span', null, h('span', {class: 'key p50'}), 'p50'),
      h('span', null, h('span', {class: 'key p99'}), 'p99'),
      h('span', null, h('span', {class: 'key bar'}), 'jobs dispatched'));
    const data = points
      .map((p) => ({t: Date.parse(p.minute), n: Number(p.count) || 0, p50: Number(p.p50_ms) || 0, p99: Number(p.p99_ms) || 0, minute: p.minute}))
      .filter((p) => !Number.isNaN(p.t))
      .sort((a, b) => a.t - b.t);
    if (data.length === 0) {
      return h('div', {id: 'lateness'}, legend, h('div', {class: 'empty'}, 'No jobs dispatched lately.'));
    }
    const W = 560, H = 170, L = 50, R = 8, T = 8, B = 20;
    const t0 = data[0].t, t1 = data[data.length - 1].t;
    const x = (t) => (t1 === t0 ? L + (W - L - R) / 2 : L + ((t - t0) / (t1 - t0)) * (W - L - R));
    const top = niceCeil(Math.max(...data.map((p) => p.p99), 1));
    const y = (ms) => T + (H - T - B) * (1 - ms / top);
    const maxN = Math.max(...data.map((p) => p.n), 1);
    const barW = Math.max(2, Math.min(12, (W - L - R) / Math.max(data.length, 1) - 1));
    const hhmm = (t) => new Date(t).toISOString().slice(11, 16);

    const chart = svg('svg', {class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'Lateness per minute'});
    for (let i = 0; i <= 4; i++) {
      const ms = (top * i) / 4;
      chart.append(svg('line', {class: 'grid', x1: L, x2: W - R, y1: y(ms), y2: y(ms)}));
      chart.append(svg('text', {x: L - 4, y: y(ms) + 3, 'text-anchor': 'end'}, duration(ms)));
    }
    for (const p of data) {
      const hgt = ((H - T - B) * 0.35 * p.n) / maxN;
      chart.append(svg('rect', {class: 'bar', x: x(p.t) - barW / 2, y: H - B - hgt, width: barW, height: hgt}));
    }
    // A minute without dispatches breaks the lines rather than bridging it.
    const runs = [];
    for (const p of data) {
      const run = runs[runs.length - 1];
      if (run && p.t - run[run.length - 1].t <= 90000) run.push(p);
      else runs.push([p]);
    }
    for (const run of runs) {
      for (const key of ['p50', 'p99']) {
        chart.append(svg('polyline', {class: key, points: run.map((p) => `${x(p.t).toFixed(1)},${y(p[key]).toFixed(1)}`).join(' ')}));
      }
    }
    for (const p of data) {
      const tip = `${hhmm(p.t)} UTC · ${p.n} jobs · p50 ${duration(p.p50)} · p99 ${duration(p.p99)}`;
      for (const key of ['p50', 'p99']) {
        chart.append(svg('circle', {class: key, cx: x(p.t), cy: y(p[key]), r: 2.2}, svg('title', null, tip)));
      }
    }
    const ticks = t1 === t0 ? [t0] : [t0, t0 + (t1 - t0) / 2, t1];
    ticks.forEach((t, i) => {
      const anchor = ticks.length === 1 ? 'middle' : ['start', 'middle', 'end'][i];
      chart.append(svg('text', {x: x(t), y: H - 6, 'text-anchor': anchor}, hhmm(t)));
    });
    const last = data[data.length - 1];
    return h('div', {id: 'lateness'}, legend, chart,
      h('div', {class: 'muted'}, `last minute (${hhmm(last.t)} UTC): ${last.n} jobs, p50 ${duration(last.p50)}, p99 ${duration(last.p99)}`));
  }

  /** 1, 2 or 5 times a power of ten, at least `v`. */
  function niceCeil(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  // ---------------------------------------------------------------------
  // #/jobs and #/jobs/{id}

  function lookupForm(values) {
    const id = h('input', {name: 'id', class: 'mono', size: 12, inputmode: 'numeric', placeholder: '17', value: values.id || ''});
    const topic = h('input', {name: 'topic', class: 'mono', size: 28, placeholder: 'orders', value: values.topic || ''});
    const key = h('input', {name: 'key', class: 'mono', size: 28, placeholder: 'order-42', value: values.key || ''});
    const problem = h('div', {class: 'error-line', id: 'lookup-error'});
    const form = h('form', {class: 'row', id: 'lookup-form'},
      h('label', {class: 'field'}, 'job id', id),
      h('span', {class: 'or'}, 'or'),
      h('label', {class: 'field'}, 'topic', topic),
      h('label', {class: 'field'}, 'key (blank: list the topic)', key),
      h('button', {type: 'submit', class: 'primary', id: 'lookup'}, 'Find'));
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      problem.textContent = '';
      const idText = id.value.trim();
      if (idText) {
        if (!/^[1-9][0-9]*$/.test(idText)) {
          problem.textContent = 'invalid_id: a job id is a number from 1, without leading zeros';
          return;
        }
        location.hash = '#/jobs/' + idText;
        return;
      }
      const topicText = topic.value.trim();
      if (!topicText) {
        problem.textContent = 'give a job id, or a topic (and a key)';
        return;
      }
      if (key.value === '') {
        location.hash = '#/jobs' + query({topic: topicText});
        return;
      }
      try {
        // Keys compare byte for byte: sent exactly as typed.
        const {data} = await api('GET', '/v1/jobs' + query({topic: topicText, key: key.value, limit: 1}));
        const job = (data.jobs || [])[0];
        if (job) location.hash = '#/jobs/' + job.id;
        else problem.textContent = 'not_found: no job on topic ' + topicText + ' with key ' + JSON.stringify(key.value);
      } catch (err) {
        problem.textContent = errorText(err);
      }
    });
    return h('section', {class: 'panel'},
      h('div', {class: 'panel-head'}, h('h2', null, 'Find a job')), form, problem);
  }

  /** #/jobs[?topic=…&status=…]: the lookup, and a listing when a topic or status is given. */
  function viewJobs(view, gen, params) {
    const topic = params.get('topic') || '';
    const status = params.get('status') || '';
    append(view, lookupForm({topic}));
    if (!topic && !status) {
      append(view, h('section', {class: 'panel', id: 'browse'},
        h('div', {class: 'panel-head'}, h('h2', null, 'Browse by status')),
        h('div', {class: 'buttons'}, STATUSES.map((s) =>
          h('a', {href: '#/jobs' + query({status: s})}, statusBadge(s))))));
      return;
    }
    const table = jobTable('jobs', {topic, status},
      [col.id, col.topic, col.key, col.status, col.runAt, col.attempt, col.updated, actionsColumn(() => table.refresh())],
      'No jobs.');
    const statusSelect = h('select', {name: 'status', 'aria-label': 'status'},
      h('option', {value: ''}, 'any status'),
      STATUSES.map((s) => h('option', {value: s, selected: s === status}, s)));
    statusSelect.addEventListener('change', () => {
      location.hash = '#/jobs' + query({topic, status: statusSelect.value});
    });
    append(view, h('section', {class: 'panel', id: 'jobs-panel'},
      h('div', {class: 'panel-head'}, h('h2', null, 'Jobs' + (topic ? ' on ' + topic : '')),
        h('span', {class: 'spacer'}), statusSelect),
      table.el));
    table.refresh();
  }

  function viewJob(view, gen, idText) {
    append(view, lookupForm({id: idText}));
    const panel = h('section', {class: 'panel', id: 'job'}, h('p', {class: 'muted'}, 'Loading job ' + idText + '…'));
    const historyPanel = h('section', {class: 'panel', id: 'history-panel'},
      h('div', {class: 'panel-head'}, h('h2', null, 'History')));
    append(view, h('div', {class: 'grid-2'}, panel, historyPanel));

    async function load() {
      let job;
      let events;
      try {
        const [jobAnswer, historyAnswer] = await Promise.all([
          api('GET', '/v1/jobs/' + encodeURIComponent(idText)),
          api('GET', '/v1/jobs/' + encodeURIComponent(idText) + '/history'),
        ]);
        job = jobAnswer.data;
        events = historyAnswer.data.events || [];
      } catch (err) {
        if (gen !== generation) return;
        clear(panel);
        append(panel, h('div', {class: 'panel-head'}, h('h2', null, 'Job ' + idText)),
          h('div', {class: 'error-line', id: 'job-error'}, errorText(err)));
        return;
      }
      if (gen !== generation) return;
      jobDraw(clear(panel), job, load);
      clear(historyPanel);
      append(historyPanel,
        h('div', {class: 'panel-head'}, h('h2', null, 'History'),
          h('span', {class: 'meta'}, events.length + (events.length === 1 ? ' change' : ' changes') + ', oldest first')),
        timeline(events));
    }
    load();
  }

  function jobDraw(panel, job, reload) {
    const action = actionFor(job);
    append(panel, h('div', {class: 'panel-head'},
      h('h2', {id: 'job-title'}, 'Job ' + job.id), statusBadge(job.status),
      h('span', {class: 'spacer'}),
      action ? actionButton(action, job, reload) : null,
      h('button', {type: 'button', class: 'small', id: 'job-reload', onclick: reload}, 'Reload')));

    const rows = [];
    const field = (name, value, extra) => {
      rows.push(h('dt', null, name), h('dd', {'data-field': name}, value, extra || null));
    };
    field('id', String(job.id));
    field('topic', h('a', {href: '#/jobs' + query({topic: job.topic})}, job.topic));
    field('key', job.key === null || job.key === undefined ? h('span', {class: 'muted'}, 'none (the id is the record key)') : job.key);
    field('status', job.status);
    field('run_at', timeText(job.run_at), h('span', {class: 'rel'}, relative(job.run_at)));
    field('attempt', job.attempt + ' of ' + job.max_attempts);
    field('version', String(job.version));
    field('expects_result', job.expects_result ? 'yes' : 'no');
    if (job.expects_result) {
      field('ack_timeout', duration(job.ack_timeout_ms));
      field('ack_deadline', timeText(job.ack_deadline), job.ack_deadline ? h('span', {class: 'rel'}, relative(job.ack_deadline)) : null);
    }
    if (job.backoff_base_ms !== undefined) {
      field('backoff', duration(job.backoff_base_ms) + ' doubling, at most ' + duration(job.backoff_cap_ms));
    }
    field('created_at', timeText(job.created_at));
    field('updated_at', timeText(job.updated_at), h('span', {class: 'rel'}, relative(job.updated_at)));
    field('dispatched_at', timeText(job.dispatched_at));
    field('kafka', job.kafka ? 'partition ' + job.kafka.partition + ', offset ' + job.kafka.offset : '—');
    append(panel, h('dl', {class: 'fields-list'}, rows));

    if (job.last_error) {
      append(panel, h('div', {class: 'sub-head'}, 'last error'), h('pre', {class: 'err', id: 'job-last-error'}, job.last_error));
    }
    const headers = Object.entries(job.headers || {});
    append(panel, h('div', {class: 'sub-head'}, 'headers'));
    append(panel, headers.length === 0 ? h('div', {class: 'empty'}, 'none')
      : h('table', {id: 'job-headers', class: 'compact'}, h('tbody', null, headers.map(([name, value]) =>
        h('tr', null, h('td', {class: 'mono'}, name), h('td', {class: 'mono wrap'}, value))))));
    append(panel, h('div', {class: 'sub-head'}, 'payload'), payloadView(job));
  }

  function payloadView(job) {
    if (job.payload !== undefined) {
      return h('pre', {id: 'job-payload'}, JSON.stringify(job.payload, null, 2));
    }
    if (job.payload_base64 !== undefined && job.payload_base64 !== null) {
      const bytes = base64Bytes(job.payload_base64);
      let asText = null;
      if (bytes) {
        try { asText = new TextDecoder('utf-8', {fatal: true}).decode(bytes); } catch (_) { asText = null; }
      }
      return h('div', {id: 'job-payload'},
        h('div', {class: 'muted'}, (bytes ? bytes.length : '?') + ' bytes' + (asText !== null ? ', shown as UTF-8 text' : ', base64')),
        h('pre', null, asText !== null ? asText : job.payload_base64));
    }
    return h('div', {class: 'empty'}, 'empty');
  }

  function base64Bytes(text) {
    try {
      const raw = atob(text);
      const bytes = new Uint8Array(raw.length);
      for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
      return bytes;
    } catch (_) {
      return null;
    }
  }

  function timeline(events) {
    if (events.length === 0) return h('div', {class: 'empty', id: 'history-empty'}, 'No history.');
    let previous = null;
    return h('ol', {class: 'timeline', id: 'history'}, events.map((e) => {
      const at = Date.parse(e.at);
      const gap = previous === null || Number.isNaN(at) ? null : '+' + duration(at - previous);
      previous = at;
      return h('li', {'data-status': e.status, 'data-actor': e.actor},
        h('div', null, h('span', {class: 'when', title: e.at}, timeText(e.at)), gap ? h('span', {class: 'gap'}, gap) : null),
        h('div', {class: 'what'},
          statusBadge(e.status),
          h('span', {class: 'actor'}, e.actor),
          h('span', {class: 'detail'}, 'attempt ' + e.attempt + ' · run_at ' + timeText(e.run_at))));
    }));
  }

  // ---------------------------------------------------------------------
  // #/bulk — preview, apply, progress

  function viewBulk(view, gen, bulkId) {
    const input = (name, attrs) => h('input', {name, class: 'mono', autocomplete: 'off', ...attrs});
    const f = {
      topic: input('topic', {placeholder: 'orders'}),
      status: h('select', {name: 'status'}, h('option', {value: ''}, 'any'), STATUSES.map((s) => h('option', {value: s}, s))),
      key_prefix: input('key_prefix', {placeholder: 'order-'}),
      run_at_from: input('run_at_from', {placeholder: '2030-01-31T09:00:00Z'}),
      run_at_to: input('run_at_to', {placeholder: '2030-01-31T10:00:00Z'}),
      ids: input('ids', {placeholder: '17, 18, 19'}),
      action: h('select', {name: 'action'},
        h('option', {value: 'cancel'}, 'cancel'),
        h('option', {value: 'shift'}, 'shift run_at by'),
        h('option', {value: 'move'}, 'move to time'),
        h('option', {value: 'redrive'}, 'redrive (dead jobs)'),
        h('option', {value: 'retarget'}, 'retarget to topic')),
      by_ms: input('by_ms', {placeholder: '3600000', inputmode: 'numeric'}),
      run_at: input('run_at', {placeholder: '2030-01-31T09:00:00Z'}),
      to_topic: input('to_topic', {placeholder: 'orders.v2'}),
    };
    const field = (label, el, hint) => h('label', {class: 'field'}, label, el, h('span', {class: 'hint'}, hint || ''));
    const byHint = h('span', {class: 'hint'});
    const byField = h('label', {class: 'field'}, 'by (ms, negative: earlier)', f.by_ms, byHint);
    const moveField = field('new run_at (RFC 3339)', f.run_at);
    const topicField = field('to topic', f.to_topic, 'a job whose key is taken there stays');
    const problem = h('div', {class: 'error-line', id: 'bulk-error'});
    const previewButton = h('button', {type: 'submit', id: 'bulk-preview'}, 'Preview');
    const applyButton = h('button', {type: 'button', id: 'bulk-apply', class: 'danger primary', disabled: true}, 'Apply');
    const previewBox = h('div', {id: 'bulk-preview-result'});
    const progressBox = h('div', {id: 'bulk-progress-panel'});

    const form = h('form', {id: 'bulk-form'},
      h('fieldset', null, h('legend', null, 'jobs matching all of'),
        h('div', {class: 'fields'},
          field('topic', f.topic),
          field('status', f.status),
          field('key prefix', f.key_prefix, 'byte for byte'),
          field('run_at from (inclusive)', f.run_at_from, 'RFC 3339'),
          field('run_at to (exclusive)', f.run_at_to, 'RFC 3339'),
          field('ids', f.ids, 'comma-separated'))),
      h('fieldset', null, h('legend', null, 'action'),
        h('div', {class: 'fields'}, field('do', f.action), byField, moveField, topicField)),
      h('div', {class: 'buttons'}, previewButton, applyButton,
        h('span', {class: 'muted'}, 'Preview is a dry run: it shows what would match and changes nothing.')),
      problem);

    append(view,
      h('section', {class: 'panel', id: 'bulk'},
        h('div', {class: 'panel-head'}, h('h2', null, 'Bulk change')), form),
      h('section', {class: 'panel'}, h('div', {class: 'panel-head'}, h('h2', null, 'Preview')),
        previewBox, progressBox));
    append(previewBox, h('div', {class: 'empty'}, 'Nothing previewed yet.'));

    let previewed = null; // {request, matched} of the last preview of this form

    function actionFieldsShow() {
      byField.hidden = f.action.value !== 'shift';
      moveField.hidden = f.action.value !== 'move';
      topicField.hidden = f.action.value !== 'retarget';
      const by = f.by_ms.value.trim();
      byHint.textContent = /^-?[0-9]+$/.test(by) ? (by.startsWith('-') ? 'earlier by ' : 'later by ') + duration(Math.abs(Number(by))) : '';
    }
    actionFieldsShow();

    // Any edit makes the preview stale: Apply only ever sends what was previewed.
    const stale = () => {
      actionFieldsShow();
      if (previewed) {
        previewed = null;
        applyButton.disabled = true;
        previewBox.classList.add('muted');
      }
    };
    form.addEventListener('input', stale);
    form.addEventListener('change', stale);

    function bulkRequest() {
      const filter = {};
      const topic = f.topic.value.trim();
      if (topic) filter.topic = topic;
      if (f.status.value) filter.status = f.status.value;
      if (f.key_prefix.value !== '') filter.key_prefix = f.key_prefix.value;
      for (const name of ['run_at_from', 'run_at_to']) {
        const text = f[name].value.trim();
        if (!text) continue;
        if (Number.isNaN(Date.parse(text))) throw new Error(name + ' ' + JSON.stringify(text) + ' is not an RFC 3339 time');
        filter[name] = text;
      }
      const idsText = f.ids.value.trim();
      if (idsText) {
        filter.ids = idsText.split(/[\s,]+/).filter(Boolean).map((part) => {
          if (!/^[1-9][0-9]*$/.test(part)) throw new Error('ids: ' + JSON.stringify(part) + ' is not a job id');
          return Number(part);
        });
      }
      if (Object.keys(filter).length === 0) throw new Error('give at least one filter: an empty one would match every job');
      let action;
      switch (f.action.value) {
        case 'shift': {
          const by = f.by_ms.value.trim();
          if (!/^-?[0-9]+$/.test(by) || Number(by) === 0) throw new Error('by: a whole number of milliseconds, not 0');
          action = {type: 'shift', by_ms: Number(by)};
          break;
        }
        case 'move': {
          const at = f.run_at.value.trim();
          if (!at || Number.isNaN(Date.parse(at))) throw new Error('new run_at: an RFC 3339 time, e.g. 2030-01-31T09:00:00Z');
          action = {type: 'move', run_at: at};
          break;
        }
        case 'retarget': {
          const topic = f.to_topic.value.trim();
          if (!topic) throw new Error('to topic: the topic the jobs go to');
          action = {type: 'retarget', topic};
          break;
        }
        default:
          action = {type: f.action.value};
      }
      return {filter, action};
    }

    function actionText(action) {
      if (typeof action !== 'object' || action === null) return String(action);
      switch (action.type) {
        case 'shift': return 'shift run_at by ' + action.by_ms + ' ms (' + duration(action.by_ms) + ')';
        case 'move': return 'move run_at to ' + action.run_at;
        case 'retarget': return 'retarget to topic ' + action.topic;
        default: return action.type;
      }
    }

    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      problem.textContent = '';
      let request;
      try {
        request = bulkRequest();
      } catch (err) {
        problem.textContent = 'invalid_request: ' + err.message;
        return;
      }
      previewButton.disabled = true;
      try {
        const {data} = await api('POST', '/v1/jobs/bulk', {...request, dry_run: true});
        if (gen !== generation) return;
        previewed = {request, matched: data.matched};
        applyButton.disabled = false;
        previewBox.classList.remove('muted');
        clear(previewBox);
        const sample = data.sample || [];
        append(previewBox,
          h('div', {class: 'matched'}, 'matched ', h('strong', {id: 'bulk-matched'}, String(data.matched)),
            ' job' + (data.matched === 1 ? '' : 's') + ' → ' + actionText(request.action),
            sample.length < data.matched ? h('span', {class: 'muted'}, ' (a sample of ' + sample.length + ' below)') : null),
          data.conflicts ? h('div', {class: 'muted', id: 'bulk-conflicts'}, data.conflicts +
            ' would stay: a job on ' + request.action.topic + ' holds their key') : null,
          sample.length === 0 ? null : h('div', {class: 'table-wrap'}, h('table', {id: 'bulk-sample'},
            h('thead', null, h('tr', null, ['id', 'topic', 'key', 'status', 'run at (UTC)', 'attempt']
              .map((t, i) => h('th', {class: i === 0 || i === 5 ? 'num' : ''}, t)))),
            h('tbody', null, sample.map((job) => h('tr', {'data-job': job.id},
              col.id[1](job), col.topic[1](job), col.key[1](job), col.status[1](job), col.runAt[1](job), col.attempt[1](job)))))));
      } catch (err) {
        if (gen !== generation) return;
        // A tickler older than bulk changes: /v1/jobs/bulk is then no route,
        // or (taken for a job id) a path that has no POST.
        if (err.code === 'no_route' || err.code === 'method_not_allowed') {
          problem.textContent = '';
          clear(previewBox);
          append(previewBox, h('p', {class: 'notice', id: 'bulk-missing'},
            'Bulk changes are not available from this server (' + err.message + ').'));
        } else {
          problem.textContent = errorText(err);
        }
      }
      previewButton.disabled = false;
    });

    applyButton.addEventListener('click', async () => {
      if (!previewed) return;
      const {request, matched} = previewed;
      const question = 'Apply "' + actionText(request.action) + '" to the ' + matched + ' matched job' +
        (matched === 1 ? '' : 's') + '?\n\nThe filter is evaluated again as it runs: jobs that changed since the preview may differ.';
      if (!window.confirm(question)) return;
      applyButton.disabled = true;
      previewButton.disabled = true;
      problem.textContent = '';
      try {
        const {data} = await api('POST', '/v1/jobs/bulk', {...request, dry_run: false});
        if (gen !== generation) return;
        previewed = null;
        // A link to this operation's progress, without redrawing the form.
        history.replaceState(null, '', '#/bulk/' + encodeURIComponent(data.id));
        progressFollow(data.id, data);
      } catch (err) {
        problem.textContent = errorText(err);
        applyButton.disabled = false;
      }
      previewButton.disabled = false;
    });

    /** Polls GET /v1/bulk/{id} every second until done or failed. */
    function progressFollow(id, first) {
      const status = h('span', {id: 'bulk-status', 'data-status': 'running'}, 'running');
      const bar = h('progress', {id: 'bulk-progress', max: 1, value: 0});
      const numbers = h('span', {id: 'bulk-numbers'});
      const errors = h('div', {id: 'bulk-errors'});
      const meta = h('span', {class: 'muted'});
      clear(progressBox);
      append(progressBox, h('div', {class: 'sub-head'}, 'bulk operation ', h('code', null, String(id))),
        h('div', {class: 'progress-line'}, status, numbers, meta), bar, errors);

      function draw(op) {
        status.textContent = op.status;
        status.dataset.status = op.status;
        status.className = op.status;
        const total = Number(op.total) || 0;
        const done = Number(op.done) || 0;
        bar.max = Math.max(total, 1);
        bar.value = op.status === 'done' && total === 0 ? 1 : done;
        const pct = total ? Math.floor((100 * done) / total) + '%' : '';
        numbers.textContent = done + ' / ' + total + ' ' + pct +
          ' · changed ' + (op.changed || 0) + ' · skipped ' + (op.skipped || 0) +
          (op.conflicts ? ' · conflicts ' + op.conflicts : '');
        meta.textContent = (op.action ? actionText(op.action) : '') +
          (op.created_at ? ' · started ' + timeText(op.created_at) : '') +
          (op.finished_at ? ' · finished ' + timeText(op.finished_at) : '');
        clear(errors);
        const list = op.errors || [];
        if (list.length) {
          append(errors, h('div', {class: 'sub-head'}, list.length + ' error' + (list.length === 1 ? '' : 's')),
            h('pre', {class: 'err'}, list.join('\n')));
        }
      }
      if (first && first.status) draw(first);

      every(BULK_POLL_MS, gen, async () => {
        let op;
        try {
          op = (await api('GET', '/v1/bulk/' + encodeURIComponent(id))).data;
        } catch (err) {
          if (gen === generation) problem.textContent = errorText(err);
          return err.status !== 404 && err.status !== 401;
        }
        if (gen !== generation) return false;
        problem.textContent = '';
        draw(op);
        if (op.status !== 'running') {
          flash(op.status === 'done' ? 'info' : 'error',
            'bulk ' + id + ' ' + op.status + ': changed ' + (op.changed || 0) + ', skipped ' + (op.skipped || 0) +
            ((op.errors || []).length ? ', ' + op.errors.length + ' errors' : ''));
          return false;
        }
        return true;
      });
    }

    if (bulkId) progressFollow(bulkId, null);
  }

  // ---------------------------------------------------------------------
  // Schedules (GET /v1/schedules) and topics (GET /v1/topics)

  /** A POST after a confirm(); flashes `done`, then `after()`. */
  async function postConfirmed(question, path, button, done, after) {
    if (question && !window.confirm(question)) return;
    if (button) button.disabled = true;
    try {
      await api('POST', path, {});
      flash('info', done);
    } catch (err) {
      flashError(err);
      if (button) button.disabled = false;
    }
    if (after) await after();
  }

  function timingText(s) {
    if (s.cron) return s.cron + ' (' + (s.time_zone || 'UTC') + ')';
    return 'every ' + duration(Number(s.every_ms));
  }

  /** #/schedules: every schedule, with pause and resume. */
  function viewSchedules(view, gen) {
    const box = h('div', {class: 'table-wrap'});
    const problem = h('div', {class: 'error-line', id: 'schedules-error'});
    let signature = null;
    append(view, h('section', {class: 'panel', id: 'schedules-panel'},
      h('div', {class: 'panel-head'}, h('h2', null, 'Schedules'),
        h('span', {class: 'meta'}, 'each occurrence becomes a job; every 5 s')),
      problem, box));

    function button(s) {
      const pause = s.status === 'active';
      if (!pause && s.status !== 'paused') return h('td');
      const label = pause ? 'Pause' : 'Resume';
      const b = h('button', {type: 'button', class: 'small ' + (pause ? 'danger' : ''),
        'data-action': pause ? 'pause' : 'resume', 'data-schedule': s.id}, label);
      b.addEventListener('click', () => postConfirmed(
        pause ? 'Pause schedule ' + s.id + '? Its occurrences not yet due are deleted; nothing more is created until you resume it.' : null,
        '/v1/schedules/' + s.id + '/' + (pause ? 'pause' : 'resume'), b,
        'schedule ' + s.id + (pause ? ' paused' : ' resumed'), refresh));
      return h('td', {class: 'actions'}, b);
    }

    async function refresh() {
      let data;
      try {
        data = (await api('GET', '/v1/schedules' + query({limit: 1000}))).data;
      } catch (err) {
        if (gen === generation) problem.textContent = errorText(err);
        return;
      }
      if (gen !== generation) return;
      problem.textContent = '';
      const list = data.schedules || [];
      const now = JSON.stringify(list.map((s) => [s.id, s.version, s.status, s.next_at, s.occurrences]));
      if (now === signature) return;
      signature = now;
      clear(box);
      if (list.length === 0) {
        append(box, h('div', {class: 'empty', id: 'schedules-empty'}, 'No schedules. Create one with POST /v1/schedules or tickler schedules create.'));
        return;
      }
      append(box, h('table', {id: 'schedules'},
        h('thead', null, h('tr', null, ['id', 'topic', 'key', 'status', 'timing', 'next', 'created', 'misfire', ''].map((t) => h('th', null, t)))),
        h('tbody', null, list.map((s) => h('tr', {'data-schedule': s.id, 'data-status': s.status},
          h('td', {class: 'num mono'}, String(s.id)),
          h('td', {class: 'mono'}, h('a', {href: '#/jobs' + query({topic: s.topic})}, s.topic)),
          h('td', {class: 'mono wrap'}, s.key),
          h('td', null, h('span', {class: 'status status-' + (s.status === 'active' ? 'pending' : s.status === 'paused' ? 'dispatching' : 'cancelled')}, s.status)),
          h('td', {class: 'mono'}, timingText(s)),
          timeCell(s.next_at),
          h('td', {class: 'num'}, count(s.occurrences)),
          h('td', null, s.misfire),
          button(s))))));
    }
    every(REFRESH_MS, gen, refresh);
  }

  // ---------------------------------------------------------------------
  // #/forecast

  /** The ranges offered: how far ahead, by what bucket. */
  const FORECAST_SPANS = [
    ['next 24 hours, by the hour', 24 * 3600e3, '1h'],
    ['next 7 days, by 6 hours', 7 * 24 * 3600e3, '6h'],
    ['next 30 days, by the day', 30 * 24 * 3600e3, '1d'],
    ['next hour, by the minute', 3600e3, '1m'],
  ];

  const BUCKET_MS = {'1m': 60e3, '1h': 3600e3, '6h': 6 * 3600e3, '1d': 24 * 3600e3};

  /**
   * The query of FORECAST_SPANS[index] (else [fallback]): whole buckets of
   * UTC (minutes, hours…) from the one now is in, so a bar is a minute of
   * the clock; the first counts what fell due since its start too.
   */
  function forecastRange(index, fallback) {
    const [, ahead, bucket] = FORECAST_SPANS[Number(index)] || FORECAST_SPANS[Number(fallback)];
    const size = BUCKET_MS[bucket];
    const from = Math.floor(Date.now() / size) * size;
    return {from: new Date(from).toISOString(), to: new Date(from + ahead).toISOString(), bucket};
  }

  function viewForecast(view, gen, params) {
    const topic = h('input', {name: 'topic', class: 'mono', size: 28, placeholder: 'every topic',
      value: params.get('topic') || ''});
    const span = h('select', {name: 'span', id: 'forecast-span'},
      ...FORECAST_SPANS.map(([label], i) => h('option', {value: String(i)}, label)));
    span.value = params.get('span') || '0';
    const form = h('form', {class: 'row', id: 'forecast-form'},
      h('label', {class: 'field'}, 'topic', topic),
      h('label', {class: 'field'}, 'range', span),
      h('button', {type: 'submit'}, 'Show'));
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      location.hash = '#/forecast' + query({topic: topic.value.trim() || null, span: span.value});
    });
    const box = h('div', {id: 'forecast-body'});
    const problem = h('div', {class: 'error-line', id: 'forecast-error'});
    const shown = params.get('topic') || '';
    append(view, h('section', {class: 'panel', id: 'forecast-panel'},
      h('div', {class: 'panel-head'}, h('h2', null, 'What falls due'),
        h('span', {class: 'meta'}, 'pending jobs, and what schedules will create; every 30 s'),
        shown ? h('span', {class: 'spacer'}) : null,
        shown ? h('a', {href: topicHref(shown, span.value), id: 'forecast-topic-link'}, shown + ' against its pace') : null),
      form, problem, box));

    async function refresh() {
      let data;
      try {
        data = (await api('GET', '/v1/forecast' + query({
          topic: topic.value.trim() || null, ...forecastRange(span.value, '0'),
        }))).data;
      } catch (err) {
        if (gen === generation) problem.textContent = errorText(err);
        return;
      }
      if (gen !== generation) return;
      problem.textContent = '';
      forecastDraw(clear(box), data, span.value);
    }
    every(30000, gen, refresh);
  }

  /** #/forecast's body: the chart of every topic it covers, and a row per topic. */
  function forecastDraw(box, data, span) {
    append(box, forecastChart(data, {chart: 'forecast-chart', empty: 'forecast-empty'}, null));
    if (forecastBuckets(data).every((b) => b.jobs + b.projected === 0)) return;
    const rows = (data.topics || []).map((t) => h('tr', {'data-topic': t.topic},
      h('td', {class: 'mono'}, h('a', {href: topicHref(t.topic, span), 'data-topic-link': t.topic}, t.topic)),
      h('td', {class: 'num'}, h('a', {href: '#/jobs' + query({topic: t.topic, status: 'pending'}), title: 'the pending jobs of ' + t.topic}, count(t.jobs))),
      h('td', {class: 'num'}, count(t.projected)),
      h('td', null, t.peak_at ? count(t.peak) + ' at ' + timeText(t.peak_at) : '—')));
    append(box, h('div', {class: 'table-wrap'}, h('table', {id: 'forecast-topics'},
      h('thead', null, h('tr', null, h('th', null, 'topic'), h('th', {class: 'num'}, 'pending'),
        h('th', {class: 'num'}, 'projected'), h('th', null, 'busiest bucket'))),
      h('tbody', null, ...rows))));
    if (data.projected_complete === false) {
      append(box, h('p', {class: 'notice'}, 'A cron schedule fires so often in this range that its projection stopped after 100,000 occurrences.'));
    }
  }

  /** A forecast's buckets, in order: {t, at, jobs, projected, n (both)}. */
  function forecastBuckets(data) {
    return (data.buckets || []).map((b) => {
      const jobs = Number(b.jobs) || 0;
      const projected = Number(b.projected) || 0;
      return {t: Date.parse(b.at), at: b.at, jobs, projected, n: jobs + projected};
    });
  }

  /** A bucket's length in words: "minute", "hour", "6 hours", "day". */
  function bucketWord(ms) {
    for (const [size, name] of [[86400e3, 'day'], [3600e3, 'hour'], [60e3, 'minute'], [1e3, 'second']]) {
      if (ms >= size && ms % size === 0) {
        const n = ms / size;
        return n === 1 ? name : n + ' ' + name + 's';
      }
    }
    return ms + ' ms';
  }

  /** "by the minute", "by 6 hours". */
  function byBucket(ms) {
    const word = bucketWord(ms);
    return 'by ' + (/^[0-9]/.test(word) ? '' : 'the ') + word;
  }

  /** `n` buckets of `ms`: "3 minutes", "2 buckets of 6 hours". */
  function bucketsOf(n, ms) {
    const word = bucketWord(ms);
    if (/^[0-9]/.test(word)) return n + (n === 1 ? ' bucket of ' : ' buckets of ') + word;
    return n + ' ' + word + (n === 1 ? '' : 's');
  }

  /** `n` jobs per bucket of `ms`: "3,000 a minute", "1,080,000 per 6 hours". */
  function perBucket(n, ms) {
    const word = bucketWord(ms);
    const article = /^[0-9]/.test(word) ? 'per' : word === 'hour' ? 'an' : 'a';
    return count(n) + ' ' + article + ' ' + word;
  }

  /** A bucket's start as the chart writes it: `01-31 14:02 UTC`. */
  function bucketAt(t) {
    return new Date(t).toISOString().slice(5, 16).replace('T', ' ') + ' UTC';
  }

  /**
   * The bars of a forecast (pending jobs, and on top what schedules will
   * create), under a legend. `pace`, when given — {perSecond, capacity
   * (what it lets out in one bucket), label} — is a line across at
   * `capacity`, as long as the busiest bucket is not below a tenth of it
   * (then the bars would be slivers: the legend says the line is off the
   * scale). `ids`: {chart, empty}; the line is `#{chart}-pace`. Each bar
   * carries data-at and data-jobs (data-projected), the line data-capacity.
   */
  function forecastChart(data, ids, pace) {
    const buckets = forecastBuckets(data);
    const busiest = Math.max(0, ...buckets.map((b) => b.n));
    const drawn = pace && busiest > 0 && pace.capacity <= 10 * busiest;
    const legend = h('div', {class: 'legend forecast'},
      h('span', null, h('span', {class: 'key bar'}), 'pending jobs'),
      h('span', null, h('span', {class: 'key projected'}), 'projected from schedules'),
      pace ? h('span', {class: 'pace-key'}, h('span', {class: 'key pace'}),
        pace.label + (busiest > 0 && !drawn ? ' (above this chart\'s scale: not drawn)' : '')) : null);
    if (busiest === 0) {
      return h('div', null, legend, h('div', {class: 'empty', id: ids.empty}, 'Nothing falls due in this range.'));
    }
    const W = 720, H = 200, L = 56, R = 8, T = 14, B = 20;
    const top = niceCeil(Math.max(busiest, drawn ? pace.capacity : 0, 1));
    const step = (W - L - R) / buckets.length;
    const barW = Math.max(1, step - 1);
    const y = (n) => T + (H - T - B) * (1 - n / top);
    const chart = svg('svg', {class: 'chart forecast', id: ids.chart, viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'Jobs due per bucket'});
    for (let i = 0; i <= 4; i++) {
      const n = (top * i) / 4;
      chart.append(svg('line', {class: 'grid', x1: L, x2: W - R, y1: y(n), y2: y(n)}));
      chart.append(svg('text', {x: L - 4, y: y(n) + 3, 'text-anchor': 'end'}, count(n)));
    }
    buckets.forEach((b, i) => {
      const x = L + i * step;
      const tip = `${b.at} · ${b.jobs} pending · ${b.projected} projected`;
      if (b.jobs > 0) {
        chart.append(svg('rect', {class: 'bar', x, y: y(b.jobs), width: barW, height: y(0) - y(b.jobs),
          'data-at': b.at, 'data-jobs': b.jobs}, svg('title', null, tip)));
      }
      if (b.projected > 0) {
        chart.append(svg('rect', {class: 'projected', x, y: y(b.n), width: barW, height: y(b.jobs) - y(b.n),
          'data-at': b.at, 'data-projected': b.projected}, svg('title', null, tip)));
      }
    });
    if (drawn) {
      const at = y(pace.capacity);
      chart.append(svg('line', {class: 'pace', id: ids.chart + '-pace', x1: L, x2: W - R, y1: at, y2: at,
        'data-capacity': pace.capacity}, svg('title', null, pace.label)));
      chart.append(svg('text', {class: 'pace-label', x: W - R - 2, y: at - 3, 'text-anchor': 'end'}, pace.label));
    }
    const first = buckets[0].t, last = buckets[buckets.length - 1].t;
    chart.append(svg('text', {x: L, y: H - 6, 'text-anchor': 'start'}, bucketAt(first).replace(' UTC', '')));
    chart.append(svg('text', {x: W - R, y: H - 6, 'text-anchor': 'end'}, bucketAt(last).replace(' UTC', '')));
    return h('div', null, legend, chart);
  }

  /**
   * What a topic's pace makes of a forecast, a line a finding: the busiest
   * bucket against what the pace lets out in a bucket and, when more falls
   * due than that, the backlog — what is left over at the end of a bucket
   * is carried into the next, and the most ever left over takes that many
   * seconds to go out at the pace. {text, over} (over: the pace is passed).
   */
  function paceReading(data, topicView) {
    const buckets = forecastBuckets(data);
    const bucketMs = Number(data.bucket_ms) || 0;
    const word = bucketWord(bucketMs);
    const perSecond = topicView ? Number(topicView.max_per_second) || 0 : 0;
    const paused = Boolean(topicView && topicView.paused);
    const lines = [];
    if (paused) lines.push('paused: nothing goes out until the topic is resumed; then what is due goes out at once, at its pace if it has one.');
    const groups = topicView && topicView.group_max_per_second
      ? ', though each group (' + topicView.group_by + ') at most ' + count(topicView.group_max_per_second) + ' a second'
      : '';
    if (!perSecond) lines.push('no pace: due jobs go out as fast as the dispatcher can' + groups + '.');
    let busiest = null;
    for (const b of buckets) if (b.n > 0 && (!busiest || b.n > busiest.n)) busiest = b;
    if (!busiest) {
      lines.push('nothing falls due in this range.');
      return {text: lines.join('\n'), over: false};
    }
    const head = 'busiest ' + word + ': ' + count(busiest.n) + (busiest.n === 1 ? ' job' : ' jobs') + ' at ' + bucketAt(busiest.t);
    if (!perSecond) {
      lines.push(head + '.');
      return {text: lines.join('\n'), over: false};
    }
    const capacity = perSecond * bucketMs / 1000;
    if (busiest.n <= capacity) {
      lines.push(head + ' — within what the pace lets out (' + perBucket(capacity, bucketMs) + ').');
      return {text: lines.join('\n'), over: false};
    }
    let left = 0, most = 0, mostAt = null, over = 0;
    for (const b of buckets) {
      if (b.n > capacity) over += 1;
      left = Math.max(0, left + b.n - capacity);
      if (left > most) { most = left; mostAt = b.t; }
    }
    const seconds = most / perSecond;
    const backlog = seconds < 60 ? '~' + Math.ceil(seconds) + ' s' : '~' + duration(seconds * 1000);
    lines.push(head + ' — more than the pace lets out (' + count(capacity) + '): ' + backlog + ' of backlog (' +
      count(most) + (most === 1 ? ' job' : ' jobs') + ' still waiting at ' + bucketAt(mostAt + bucketMs) +
      ', going out at ' + count(perSecond) + '/s)' +
      (over > 1 ? '; ' + bucketsOf(over, bucketMs) + ' go over the pace.' : '.'));
    return {text: lines.join('\n'), over: true};
  }

  // ---------------------------------------------------------------------
  // #/topics/{topic}

  /** The address of a topic's page (with a range of FORECAST_SPANS, if given). */
  function topicHref(topic, span) {
    return '#/topics/' + encodeURIComponent(topic) + query({span: span === undefined ? null : span});
  }

  /** The default range of a topic's page: the next hour, by the minute. */
  const TOPIC_SPAN = String(FORECAST_SPANS.findIndex(([, , bucket]) => bucket === '1m'));

  /**
   * #/topics/{topic}: what a consumer of the topic wants to know with a
   * read token — is it paused, what is its pace, how far its watermark
   * has come, and what falls due on it ahead against that pace. Only
   * GET /v1/topics/{topic} and GET /v1/forecast?topic= (read scope).
   */
  function viewTopic(view, gen, encoded, params) {
    let topic;
    try {
      topic = decodeURIComponent(encoded);
    } catch (_) {
      topic = encoded;
    }
    const span = h('select', {name: 'span', id: 'topic-span', 'aria-label': 'range'},
      ...FORECAST_SPANS.map(([label], i) => h('option', {value: String(i)}, label)));
    const wanted = params.get('span');
    span.value = /^[0-9]+$/.test(wanted || '') && FORECAST_SPANS[Number(wanted)] ? wanted : TOPIC_SPAN;
    span.addEventListener('change', () => {
      location.hash = topicHref(topic, span.value === TOPIC_SPAN ? undefined : span.value);
    });
    const problem = h('div', {class: 'error-line', id: 'topic-error'});
    const state = h('div', {id: 'topic-state'}, h('p', {class: 'muted'}, 'Loading…'));
    const reading = h('p', {class: 'reading', id: 'topic-reading'});
    const chartBox = h('div', {id: 'topic-forecast'});
    const asOf = h('span', {class: 'meta', id: 'topic-at'});
    append(view,
      h('section', {class: 'panel', id: 'topic-panel', 'data-topic': topic},
        h('div', {class: 'panel-head'},
          h('h2', {id: 'topic-title'}, 'Topic ', h('span', {class: 'mono'}, topic)),
          h('span', {class: 'spacer'}),
          h('span', {class: 'links'},
            h('a', {href: '#/jobs' + query({topic, status: 'pending'}), id: 'topic-jobs'}, 'pending jobs'),
            h('a', {href: '#/jobs' + query({topic})}, 'all its jobs'),
            h('a', {href: '#/topics'}, 'all topics'))),
        problem, state),
      h('section', {class: 'panel', id: 'topic-forecast-panel'},
        h('div', {class: 'panel-head'}, h('h2', null, 'What falls due on it'),
          h('span', {class: 'meta'}, 'pending jobs, and what schedules will create, against the pace; every 30 s'),
          h('span', {class: 'spacer'}), asOf),
        h('form', {class: 'row', onsubmit: (event) => event.preventDefault()},
          h('label', {class: 'field'}, 'range', span)),
        reading, chartBox));

    async function refresh() {
      const [control, forecast] = await Promise.allSettled([
        api('GET', '/v1/topics/' + encodeURIComponent(topic)),
        api('GET', '/v1/forecast' + query({topic, ...forecastRange(span.value, TOPIC_SPAN)})),
      ]);
      if (gen !== generation) return;
      // One message for both when both are refused alike (a 403 outside
      // the token's topics), else each.
      const errors = [...new Set([control, forecast]
        .filter((r) => r.status === 'rejected').map((r) => errorText(r.reason)))];
      problem.textContent = errors.join('\n');
      const topicView = control.status === 'fulfilled' ? control.value.data : null;
      if (topicView) topicStateDraw(clear(state), topicView);
      else if (state.querySelector('p.muted')) clear(state);
      if (forecast.status !== 'fulfilled') return;
      const data = forecast.value.data;
      const perSecond = topicView ? Number(topicView.max_per_second) || 0 : 0;
      const bucketMs = Number(data.bucket_ms) || 0;
      const pace = perSecond && bucketMs ? {
        perSecond,
        capacity: perSecond * bucketMs / 1000,
        label: 'pace: ' + count(perSecond) + '/s = ' + perBucket(perSecond * bucketMs / 1000, bucketMs),
      } : null;
      const said = topicView ? paceReading(data, topicView) : {text: '', over: false};
      reading.textContent = said.text;
      reading.classList.toggle('over', said.over);
      const total = forecastBuckets(data).reduce((sum, b) => ({jobs: sum.jobs + b.jobs, projected: sum.projected + b.projected}), {jobs: 0, projected: 0});
      asOf.textContent = 'as of ' + timeText(data.at);
      append(clear(chartBox),
        forecastChart(data, {chart: 'topic-chart', empty: 'topic-chart-empty'}, pace),
        h('p', {class: 'muted', id: 'topic-total', 'data-jobs': total.jobs, 'data-projected': total.projected},
          count(total.jobs) + (total.jobs === 1 ? ' pending job' : ' pending jobs') + ' and ' +
          count(total.projected) + ' projected from schedules due in this range, ' + byBucket(bucketMs) + '. ',
          h('a', {href: '#/forecast' + query({topic, span: span.value})}, 'On the forecast page')),
        data.projected_complete === false
          ? h('p', {class: 'notice'}, 'A cron schedule fires so often in this range that its projection stopped after 100,000 occurrences.')
          : null);
    }
    every(30000, gen, refresh);
  }

  /** A topic's controls, as GET /v1/topics/{topic} has them. */
  function topicStateDraw(box, t) {
    const row = (field, label, ...value) => [h('dt', null, label), h('dd', {'data-field': field}, ...value)];
    const source = {api: 'set through the API', config: 'from the configuration'}[t.max_per_second_source] || t.max_per_second_source;
    append(box, h('dl', {class: 'fields-list'},
      row('state', 'state', t.paused
        ? h('span', {class: 'status status-dead', 'data-paused': 'true'}, 'paused')
        : h('span', {class: 'status status-succeeded', 'data-paused': 'false'}, 'running')),
      row('pace', 'pace', t.max_per_second
        ? count(t.max_per_second) + (Number(t.max_per_second) === 1 ? ' job' : ' jobs') + ' a second across every instance' +
          (source ? ' (' + source + ')' : '')
        : 'none: due jobs go out as fast as the dispatcher can'),
      t.group_by ? row('group', 'groups', 'by ' + t.group_by + ' — ' + (t.group_max_per_second
        ? 'each group at most ' + count(t.group_max_per_second) + ' a second'
        : 'sharing the pace fairly')) : null,
      t.watermark ? row('watermark', 'watermark', timeText(t.watermark),
        h('span', {class: 'rel'}, relative(t.watermark) + ' · every job due by then is done with')) : null,
      t.updated_by ? row('changed', 'changed', t.updated_by + ' at ' + timeText(t.updated_at)) : null));
  }

  // ---------------------------------------------------------------------
  // #/audit

  /** #/audit: who changed the rules, newest first (admin scope). */
  function viewAudit(view, gen, params) {
    const action = h('input', {name: 'action', class: 'mono', size: 18, placeholder: 'topic, schedule.modify',
      value: params.get('action') || ''});
    const actor = h('input', {name: 'actor', class: 'mono', size: 18, placeholder: 'api:NAME, cli',
      value: params.get('actor') || ''});
    const form = h('form', {class: 'row', id: 'audit-form'},
      h('label', {class: 'field'}, 'action', action),
      h('label', {class: 'field'}, 'actor', actor),
      h('button', {type: 'submit'}, 'Show'));
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      location.hash = '#/audit' + query({action: action.value.trim() || null, actor: actor.value.trim() || null});
    });
    const box = h('div', {class: 'table-wrap', id: 'audit-body'});
    const problem = h('div', {class: 'error-line', id: 'audit-error'});
    append(view, h('section', {class: 'panel', id: 'audit-panel'},
      h('div', {class: 'panel-head'}, h('h2', null, 'Audit log'),
        h('span', {class: 'meta'}, 'control-plane changes, newest first; the last 100')),
      form, problem, box));
    (async () => {
      let data;
      try {
        data = (await api('GET', '/v1/audit' + query({
          action: params.get('action') || null, actor: params.get('actor') || null, limit: 100,
        }))).data;
      } catch (err) {
        if (gen === generation) problem.textContent = errorText(err);
        return;
      }
      if (gen !== generation) return;
      const entries = data.entries || [];
      if (entries.length === 0) {
        append(box, h('div', {class: 'empty', id: 'audit-empty'}, 'No change recorded.'));
        return;
      }
      const outcome = (e) => e.status == null ? 'unknown' : e.status === 0 ? 'failed' : String(e.status);
      const detail = (e) => h('details', null, h('summary', null, 'before / request / after'),
        h('pre', {class: 'mono'}, JSON.stringify({before: e.before, request: e.request, after: e.after}, null, 2)));
      append(box, h('table', {id: 'audit-table'},
        h('thead', null, h('tr', null, h('th', null, 'at'), h('th', null, 'actor'), h('th', null, 'action'),
          h('th', null, 'target'), h('th', null, 'status'), h('th', null, 'from'), h('th', null, 'what'))),
        h('tbody', null, ...entries.map((e) => h('tr', {'data-action': e.action},
          h('td', null, timeText(e.at)),
          h('td', {class: 'mono'}, e.actor),
          h('td', {class: 'mono'}, e.action),
          h('td', {class: 'mono'}, e.target || '—'),
          h('td', null, outcome(e)),
          h('td', {class: 'mono'}, e.origin || '—'),
          h('td', null, detail(e)))))));
    })();
  }

  /** #/topics: paused and paced topics; pause or open a topic by name. */
  function viewTopics(view, gen) {
    const box = h('div', {class: 'table-wrap'});
    const problem = h('div', {class: 'error-line', id: 'topics-error'});
    const name = h('input', {name: 'topic', class: 'mono', size: 28, placeholder: 'orders'});
    // Open: the topic's page (read scope), for any topic, paced or not.
    const open = h('button', {type: 'button', id: 'open-topic', title: 'Its state, and what falls due on it against its pace'}, 'Open');
    const form = h('form', {class: 'row', id: 'pause-form'},
      h('label', {class: 'field'}, 'topic', name),
      open,
      h('button', {type: 'submit', class: 'danger', id: 'pause-topic'}, 'Pause'));
    open.addEventListener('click', () => {
      const topic = name.value.trim();
      if (!topic) {
        problem.textContent = 'give a topic';
        return;
      }
      location.hash = topicHref(topic);
    });
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      const topic = name.value.trim();
      if (!topic) {
        problem.textContent = 'give a topic';
        return;
      }
      postConfirmed('Pause topic ' + topic + '? Its due jobs stay pending until you resume it.',
        '/v1/topics/' + encodeURIComponent(topic) + '/pause', null, 'topic ' + topic + ' paused', refresh);
    });
    append(view, h('section', {class: 'panel', id: 'topics-panel'},
      h('div', {class: 'panel-head'}, h('h2', null, 'Paused and paced topics'),
        h('span', {class: 'meta'}, 'every 5 s')),
      form, problem, box));

    async function refresh() {
      let data;
      try {
        data = (await api('GET', '/v1/topics')).data;
      } catch (err) {
        if (gen === generation) problem.textContent = errorText(err);
        return;
      }
      if (gen !== generation) return;
      problem.textContent = '';
      const list = data.topics || [];
      clear(box);
      if (list.length === 0) {
        append(box, h('div', {class: 'empty', id: 'topics-empty'}, 'No topic is paused or paced.'));
        return;
      }
      append(box, h('table', {id: 'topics'},
        h('thead', null, h('tr', null, ['topic', 'state', 'pace', 'changed by', 'at', ''].map((t) => h('th', null, t)))),
        h('tbody', null, list.map((t) => {
          const resume = h('button', {type: 'button', class: 'small', 'data-action': t.paused ? 'resume' : 'pause', 'data-topic': t.topic}, t.paused ? 'Resume' : 'Pause');
          resume.addEventListener('click', () => postConfirmed(
            t.paused ? null : 'Pause topic ' + t.topic + '? Its due jobs stay pending until you resume it.',
            '/v1/topics/' + encodeURIComponent(t.topic) + '/' + (t.paused ? 'resume' : 'pause'), resume,
            'topic ' + t.topic + (t.paused ? ' resumed' : ' paused'), refresh));
          return h('tr', {'data-topic': t.topic, 'data-paused': String(t.paused)},
            h('td', {class: 'mono'}, h('a', {href: topicHref(t.topic), 'data-topic-link': t.topic}, t.topic)),
            h('td', null, t.paused ? h('span', {class: 'status status-dead'}, 'paused') : 'running'),
            h('td', {class: 'num'}, t.max_per_second ? count(t.max_per_second) + '/s (' + t.max_per_second_source + ')' : '—'),
            h('td', {class: 'mono'}, t.updated_by || '—'),
            timeCell(t.updated_at),
            h('td', {class: 'actions'},
              h('a', {class: 'jobs-link', href: '#/jobs' + query({topic: t.topic})}, 'jobs'), resume));
        }))));
    }
    every(REFRESH_MS, gen, refresh);
  }

  // ---------------------------------------------------------------------

  // A message belongs to the view it was shown on.
  window.addEventListener('hashchange', () => {
    flashClear();
    render();
  });
  window.addEventListener('DOMContentLoaded', () => {
    authDraw();
    render();
  });
})();
