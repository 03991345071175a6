// weir's trace UI: search traces and view one as a waterfall, through
// Jaeger's query API (api/services, api/services/<s>/operations,
// api/traces, api/traces/<id>). Plain ES module, no build step, no
// dependencies. Routes, relative to Jaeger's base path, are Jaeger's own:
//   search?service=S&operation=O&lookback=1h&limit=20    a search
//   trace/<traceID>                                       one trace
//   trace/<traceID>?uiFind=<spanID>                       ... with that span open
// Every URL is relative to <base href>, which Jaeger rewrites to its base
// path, so the UI works under ui.base_path too.

const base = new URL(document.baseURI);
const main = document.getElementById('main');
const form = document.getElementById('search');
const panel = document.getElementById('search-panel');
const palette = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#b07aa1',
  '#edc948', '#9c755f', '#ff9da7', '#17becf', '#bcbd22', '#bab0ac'];
const lookbacks = { m: 60e3, h: 3600e3, d: 86400e3 };

let services = [];         // from api/services, sorted: their order picks colours
let lastSearch = 'search'; // where "Back to search" goes
let generation = 0;        // the latest navigation; older answers are dropped
let sortBy = 'recent';
let servicesError = null;  // api/services failed: shown on the search page

// ---- helpers -----------------------------------------------------------------

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v == null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'style') Object.assign(el.style, v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  el.append(...children.flat(Infinity).filter((c) => c != null && c !== false));
  return el;
}

function api(path, params = {}) {
  const url = new URL('api/' + path, base);
  for (const [k, v] of Object.entries(params)) if (v !== '' && v != null) url.searchParams.set(k, v);
  return url;
}

// getJSON returns the data of a query API answer, or throws an Error that
// says what went wrong: no answer, an HTTP error, or Jaeger's own errors.
async function getJSON(url) {
  let res;
  try {
    res = await fetch(url, { headers: { Accept: 'application/json' } });
  } catch (e) {
    throw new Error(`cannot reach the query API (${url.pathname}): ${e.message}`);
  }
  let body = null;
  try { body = await res.json(); } catch { /* not JSON: reported below */ }
  const msgs = (body?.errors ?? []).map((e) => e.msg).filter(Boolean).join('; ');
  if (!res.ok) throw new Error(`${url.pathname}: ${msgs || `${res.status} ${res.statusText}`}`);
  if (!body) throw new Error(`${url.pathname}: the answer is not JSON`);
  if (msgs && body.data == null) throw new Error(`${url.pathname}: ${msgs}`);
  return body.data;
}

function colour(service) {
  let i = services.indexOf(service);
  if (i < 0) i = [...service].reduce((a, c) => (a * 31 + c.charCodeAt(0)) >>> 0, 7);
  return palette[i % palette.length];
}

const swatch = (service) => h('span', { class: 'swatch', style: { background: colour(service) }, 'aria-hidden': 'true' });

function fmtDuration(us) {
  if (us < 1000) return `${Math.round(us)}µs`;
  if (us < 1e6) return `${+(us / 1e3).toFixed(us < 1e4 ? 2 : 1)}ms`;
  if (us < 60e6) return `${+(us / 1e6).toFixed(2)}s`;
  return `${Math.floor(us / 60e6)}m ${Math.round((us % 60e6) / 1e6)}s`;
}

function fmtTime(us) {
  const d = new Date(us / 1000), p = (n, w = 2) => String(n).padStart(w, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ` +
    `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

function fmtAgo(us) {
  const s = Math.max(0, (Date.now() - us / 1000) / 1000);
  if (s < 60) return `${Math.round(s)}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  if (s < 86400) return `${Math.round(s / 3600)}h ago`;
  return `${Math.round(s / 86400)}d ago`;
}

const timeEl = (us) => h('time', { datetime: new Date(us / 1000).toISOString() }, fmtTime(us));

const errorEl = (err) => h('p', { class: 'error', role: 'alert' }, h('strong', {}, 'Error: '), err.message || String(err));
const showError = (where, err) => where.append(errorEl(err));

const isError = (span) => span.tags.some((t) =>
  (t.key === 'error' && (t.value === true || t.value === 'true')) || (t.key === 'otel.status_code' && t.value === 'ERROR'));

// ---- a trace as a tree ------------------------------------------------------------

// analyse orders a trace's spans depth first (children by start time), and
// finds its root, start, duration and services.
function analyse(trace) {
  const spans = trace.spans ?? [];
  const byID = new Map(spans.map((s) => [s.spanID, s]));
  const children = new Map();
  const roots = [];
  for (const s of spans) {
    s.service = trace.processes?.[s.processID]?.serviceName ?? '(unknown service)';
    s.tags ??= [];
    const parent = (s.references ?? []).find((r) => byID.has(r.spanID) && r.spanID !== s.spanID);
    if (parent) {
      if (!children.has(parent.spanID)) children.set(parent.spanID, []);
      children.get(parent.spanID).push(s);
    } else roots.push(s);
  }
  const byStart = (a, b) => a.startTime - b.startTime;
  const ordered = [];
  const seen = new Set();
  const walk = (s, depth) => {
    if (seen.has(s.spanID)) return; // a reference cycle: show each span once
    seen.add(s.spanID);
    s.depth = depth;
    ordered.push(s);
    for (const c of (children.get(s.spanID) ?? []).sort(byStart)) walk(c, depth + 1);
  };
  roots.sort(byStart).forEach((r) => walk(r, 0));
  spans.filter((s) => !seen.has(s.spanID)).forEach((s) => walk(s, 0));
  const start = Math.min(...spans.map((s) => s.startTime));
  const end = Math.max(...spans.map((s) => s.startTime + s.duration));
  const svc = new Map();
  for (const s of spans) svc.set(s.service, (svc.get(s.service) ?? 0) + 1);
  return {
    id: trace.traceID, spans: ordered, root: roots[0] ?? ordered[0], start, duration: end - start,
    services: [...svc].sort((a, b) => a[0].localeCompare(b[0])), errors: spans.filter(isError).length,
    depth: Math.max(0, ...ordered.map((s) => s.depth)) + 1, processes: trace.processes ?? {},
    warnings: trace.warnings ?? [],
  };
}

const traceTitle = (t) => t.root
  ? [swatch(t.root.service), h('span', { class: 'svc' }, t.root.service), ': ', t.root.operationName]
  : '(no spans)';

const serviceChips = (t) => h('ul', { class: 'chips', 'aria-label': 'services' },
  t.services.map(([name, n]) => h('li', { class: 'chip', 'data-service': name }, swatch(name), `${name} (${n})`)));

// ---- search -------------------------------------------------------------------------

async function loadOperations(service, selected = '') {
  const sel = form.operation, note = document.getElementById('form-error');
  sel.replaceChildren(h('option', { value: '' }, 'All operations'));
  note.replaceChildren(...(servicesError ? [errorEl(servicesError)] : []));
  if (service) {
    try {
      const ops = (await getJSON(api(`services/${encodeURIComponent(service)}/operations`))) ?? [];
      for (const op of [...ops].sort()) sel.append(h('option', { value: op }, op));
    } catch (e) {
      showError(note, e);
    }
  }
  if (selected && ![...sel.options].some((o) => o.value === selected)) sel.append(h('option', { value: selected }, selected));
  sel.value = selected;
}

async function fillForm(q) {
  const sel = form.service;
  sel.replaceChildren(h('option', { value: '' }, services.length ? 'Choose a service' : 'No services yet'));
  for (const s of services) sel.append(h('option', { value: s }, s));
  const service = q.get('service') ?? '';
  if (service && !services.includes(service)) sel.append(h('option', { value: service }, service));
  sel.value = service;
  form.lookback.value = q.get('lookback') || '1h';
  if (!form.lookback.value) form.lookback.value = '1h';
  form.limit.value = q.get('limit') || '20';
  await loadOperations(service, q.get('operation') ?? '');
}

async function showSearch(q, gen) {
  panel.hidden = false;
  document.title = 'Search · weir traces';
  main.replaceChildren();
  await fillForm(q);
  if (gen !== generation) return;
  const service = q.get('service');
  if (!service) {
    let hint = 'Choose a service and find its traces.';
    if (servicesError) hint = 'The services could not be listed: see the error in the search form.';
    else if (!services.length) hint = 'No service has sent a trace yet. Services export traces over OTLP (4317 gRPC, 4318 HTTP).';
    main.append(h('p', { class: 'hint' }, hint));
    return;
  }
  const lookback = form.lookback.value;
  const ms = parseFloat(lookback) * (lookbacks[lookback.slice(-1)] ?? 3600e3);
  const end = Date.now() * 1000;
  main.append(h('p', { class: 'hint', role: 'status' }, `Searching ${service}…`));
  let traces;
  try {
    traces = (await getJSON(api('traces', {
      service, operation: q.get('operation'), limit: form.limit.value, lookback,
      start: Math.round(end - ms * 1000), end,
    }))) ?? [];
  } catch (e) {
    if (gen !== generation) return;
    main.replaceChildren();
    showError(main, e);
    return;
  }
  if (gen !== generation) return;
  const period = form.lookback.selectedOptions[0]?.textContent.toLowerCase() ?? lookback;
  renderResults(traces.filter((t) => t.spans?.length).map(analyse), service, period);
}

function renderResults(traces, service, lookback) {
  const sorts = {
    recent: (a, b) => b.start - a.start,
    longest: (a, b) => b.duration - a.duration,
    shortest: (a, b) => a.duration - b.duration,
    spans: (a, b) => b.spans.length - a.spans.length,
  };
  const longest = Math.max(1, ...traces.map((t) => t.duration));
  const sortSel = h('select', { id: 'sort', onchange: (e) => { sortBy = e.target.value; draw(); } },
    h('option', { value: 'recent' }, 'Most recent'), h('option', { value: 'longest' }, 'Longest first'),
    h('option', { value: 'shortest' }, 'Shortest first'), h('option', { value: 'spans' }, 'Most spans'));
  sortSel.value = sortBy;
  const list = h('ol', { class: 'traces', 'aria-labelledby': 'results-title' });
  const draw = () => list.replaceChildren(...[...traces].sort(sorts[sortBy]).map((t) =>
    h('li', { class: 'trace', 'data-trace-id': t.id, 'data-span-count': t.spans.length },
      h('a', { href: `trace/${t.id}`, 'data-nav': true, class: 'trace-link' },
        h('span', { class: 'trace-title' }, traceTitle(t)),
        h('span', { class: 'trace-id' }, t.id.slice(0, 7)),
        h('span', { class: 'trace-duration' }, fmtDuration(t.duration))),
      h('span', { class: 'duration-bar', style: { width: `${(100 * t.duration) / longest}%` }, 'aria-hidden': 'true' }),
      h('div', { class: 'trace-meta' },
        h('span', { class: 'span-count' }, `${t.spans.length} span${t.spans.length === 1 ? '' : 's'}`),
        t.errors ? h('span', { class: 'errors' }, `${t.errors} error${t.errors === 1 ? '' : 's'}`) : null,
        serviceChips(t),
        h('span', { class: 'when' }, timeEl(t.start), ' · ', fmtAgo(t.start))))));
  draw();
  main.replaceChildren(
    h('div', { class: 'results-head' },
      h('h1', { id: 'results-title' }, `${traces.length} trace${traces.length === 1 ? '' : 's'}`),
      traces.length > 1 ? h('label', {}, 'Sort ', sortSel) : null),
    traces.length ? list : h('p', { class: 'hint' }, `No traces of ${service} in the ${lookback}.`));
}

// ---- one trace ----------------------------------------------------------------------

async function showTrace(id, gen, find) {
  panel.hidden = true;
  document.title = `Trace ${id.slice(0, 7)} · weir traces`;
  main.replaceChildren(h('p', { class: 'hint', role: 'status' }, `Loading trace ${id}…`));
  let data;
  try {
    data = await getJSON(api(`traces/${encodeURIComponent(id)}`));
  } catch (e) {
    if (gen !== generation) return;
    main.replaceChildren(h('a', { href: lastSearch, 'data-nav': true }, '← Search'));
    showError(main, e);
    return;
  }
  if (gen !== generation) return;
  const trace = data?.[0];
  if (!trace?.spans?.length) {
    main.replaceChildren(h('a', { href: lastSearch, 'data-nav': true }, '← Search'));
    showError(main, new Error(`trace ${id} has no spans`));
    return;
  }
  const t = analyse(trace);
  if (lastSearch === 'search') lastSearch = `search?${new URLSearchParams({ service: t.root.service })}`;
  renderTrace(t);
  const found = main.querySelector(`.span-row[data-span-id="${CSS.escape(find ?? '')}"]`);
  if (found) {
    found.classList.add('found');
    found.querySelector('button').click();
    found.scrollIntoView({ block: 'center' });
  } else main.focus();
}

function renderTrace(t) {
  const pct = (us) => `${(100 * us) / Math.max(1, t.duration)}%`;
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) =>
    h('span', { class: 'tick', style: { left: `${100 * f}%` } }, fmtDuration(f * t.duration)));
  const rows = t.spans.map((s, i) => {
    const detailID = `span-${i}`;
    const detail = h('div', { class: 'span-detail', id: detailID, hidden: true });
    const button = h('button', {
      type: 'button', class: 'span-name', 'aria-expanded': 'false', 'aria-controls': detailID,
      style: { paddingLeft: `${0.4 + s.depth * 1.1}rem` },
      onclick: () => {
        const open = button.getAttribute('aria-expanded') !== 'true';
        button.setAttribute('aria-expanded', String(open));
        if (open && !detail.childElementCount) detail.append(...spanDetail(s, t).flat().filter(Boolean));
        detail.hidden = !open;
      },
    }, swatch(s.service), h('span', { class: 'svc' }, s.service), ' ', h('span', { class: 'op' }, s.operationName),
    isError(s) ? h('span', { class: 'errors' }, 'error') : null);
    const left = s.startTime - t.start;
    return h('li', { class: 'span-row', 'data-span-id': s.spanID, 'data-service': s.service, 'data-depth': s.depth },
      h('div', { class: 'span-line' }, button,
        h('div', { class: 'span-timeline' },
          h('span', { class: 'span-bar', style: { left: pct(left), width: `max(2px, ${pct(s.duration)})`, background: colour(s.service) } }),
          h('span', { class: 'span-duration', style: left > t.duration / 2 ? { right: `calc(100% - ${pct(left)} + 0.3rem)` } : { left: `calc(${pct(left + s.duration)} + 0.3rem)` } },
            fmtDuration(s.duration)))),
      detail);
  });
  main.replaceChildren(h('article', { class: 'trace-view', 'data-trace-id': t.id, 'data-span-count': t.spans.length },
    h('a', { href: lastSearch, 'data-nav': true }, '← Search'),
    h('h1', {}, traceTitle(t), ' ', h('span', { class: 'trace-id' }, t.id)),
    h('dl', { class: 'summary' },
      h('div', {}, h('dt', {}, 'Start'), h('dd', {}, timeEl(t.start))),
      h('div', {}, h('dt', {}, 'Duration'), h('dd', {}, fmtDuration(t.duration))),
      h('div', {}, h('dt', {}, 'Spans'), h('dd', { class: 'span-count' }, `${t.spans.length} spans`)),
      h('div', {}, h('dt', {}, 'Depth'), h('dd', {}, String(t.depth))),
      t.errors ? h('div', {}, h('dt', {}, 'Errors'), h('dd', { class: 'errors' }, String(t.errors))) : null,
      h('div', {}, h('dt', {}, `Services (${t.services.length})`), h('dd', {}, serviceChips(t)))),
    t.warnings.length ? h('ul', { class: 'error', role: 'alert' }, t.warnings.map((w) => h('li', {}, w))) : null,
    h('div', { class: 'waterfall' },
      h('div', { class: 'span-line waterfall-head', 'aria-hidden': 'true' },
        h('span', { class: 'span-name' }, 'Service and operation'), h('div', { class: 'span-timeline' }, ticks)),
      h('ol', { class: 'spans', 'aria-label': 'spans, by parent' }, rows))));
}

function kvTable(caption, kvs) {
  if (!kvs?.length) return null;
  return h('table', { class: 'kv' }, h('caption', {}, caption),
    h('tbody', {}, kvs.map((kv) => h('tr', {}, h('th', { scope: 'row' }, kv.key), h('td', {}, String(kv.value))))));
}

function spanDetail(s, t) {
  const proc = t.processes[s.processID];
  return [
    h('dl', { class: 'summary' },
      h('div', {}, h('dt', {}, 'Service'), h('dd', {}, s.service)),
      h('div', {}, h('dt', {}, 'Operation'), h('dd', {}, s.operationName)),
      h('div', {}, h('dt', {}, 'Start'), h('dd', {}, `+${fmtDuration(s.startTime - t.start)}`)),
      h('div', {}, h('dt', {}, 'Duration'), h('dd', {}, fmtDuration(s.duration))),
      h('div', {}, h('dt', {}, 'Span ID'), h('dd', { class: 'trace-id' }, s.spanID)),
      (s.references ?? []).length ? h('div', {}, h('dt', {}, 'References'),
        h('dd', {}, s.references.map((r) => `${r.refType} ${r.spanID}`).join(', '))) : null),
    s.warnings?.length ? h('ul', { class: 'warnings' }, s.warnings.map((w) => h('li', {}, w))) : null,
    kvTable('Tags', s.tags),
    kvTable(`Process: ${proc?.serviceName ?? s.processID}`, proc?.tags),
    (s.logs ?? []).map((l) => kvTable(`Log at +${fmtDuration(l.timestamp - t.start)}`, l.fields)),
  ];
}

// ---- navigation -----------------------------------------------------------------------

async function route() {
  const gen = ++generation;
  const path = location.pathname.startsWith(base.pathname)
    ? location.pathname.slice(base.pathname.length) : location.pathname.replace(/^\//, '');
  const m = path.match(/^trace\/([^/]+)\/?$/);
  if (m) return showTrace(decodeURIComponent(m[1]), gen, new URLSearchParams(location.search).get('uiFind'));
  lastSearch = `search${location.search}`;
  return showSearch(new URLSearchParams(location.search), gen);
}

function go(href) {
  history.pushState(null, '', href);
  route();
}

document.addEventListener('click', (e) => {
  const a = e.target.closest('a[data-nav]');
  if (!a || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  e.preventDefault();
  go(a.href);
});
addEventListener('popstate', route);

form.addEventListener('submit', (e) => {
  e.preventDefault();
  const q = new URLSearchParams();
  for (const k of ['service', 'operation', 'lookback', 'limit']) if (form[k].value) q.set(k, form[k].value);
  go(new URL(`search?${q}`, base));
});
form.service.addEventListener('change', () => loadOperations(form.service.value));
document.getElementById('open-trace').addEventListener('submit', (e) => {
  e.preventDefault();
  const id = document.getElementById('trace-id').value.trim().toLowerCase();
  go(new URL(`trace/${encodeURIComponent(id)}`, base));
});

const { version, config } = window.JAEGER_UI ?? {};
if (config?.search?.maxLimit) form.limit.max = config.search.maxLimit;
document.getElementById('footer').textContent =
  `weir trace UI · Jaeger ${version?.gitVersion || 'v2'} query API at ${new URL('api/', base).pathname}`;

try {
  services = ((await getJSON(api('services'))) ?? []).sort();
} catch (e) {
  servicesError = e;
}
route();
