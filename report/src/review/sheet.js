// cohort review sheet (report/src/review/sheet.rs writes it into the page).
// Everything the page shows comes from the JSON in #sheet-data and is put
// into the DOM as text (never as markup). Work is kept in localStorage under
// the sheet id; `Download labels` saves the file `cohort review import` reads.
(function () {
  'use strict';
  var D = JSON.parse(document.getElementById('sheet-data').textContent);
  var L = D.labels;
  var STORE = 'cohort-sheet:' + D.sheet_id;
  var ADJ = D.mode === 'adjudicate';
  var st = load();
  var cards = [];
  var cur = 0;

  function load() {
    var empty = ADJ ? { adjudicator: '', d: {} } : { ext: {}, claim: {}, pair: {}, unc: {}, added: {}, note: {}, seq: 0 };
    try {
      var saved = JSON.parse(window.localStorage.getItem(STORE) || 'null');
      if (saved && typeof saved === 'object') { for (var k in empty) { if (!(k in saved)) saved[k] = empty[k]; } return saved; }
    } catch (e) { /* a broken entry starts afresh */ }
    return empty;
  }
  function save() {
    try { window.localStorage.setItem(STORE, JSON.stringify(st)); } catch (e) { say('cannot keep the work in this browser: ' + e, true); }
    refresh();
  }
  function say(text, error) { var s = document.getElementById('status'); s.textContent = text; s.className = error ? 'error' : ''; }

  // --- DOM helpers: text only ---
  function el(tag, attrs, kids) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) { if (k === 'text') e.textContent = attrs[k]; else if (k === 'cls') e.className = attrs[k]; else e.setAttribute(k, attrs[k]); }
    (kids || []).forEach(function (c) { if (c) e.appendChild(typeof c === 'string' ? document.createTextNode(c) : c); });
    return e;
  }
  function field(label, required, input) { return el('div', {}, [el('span', { cls: required ? 'required' : '', text: label + ' ' }), input]); }
  function text(value, onInput, wide, area) {
    var i = el(area ? 'textarea' : 'input', area ? { rows: '2' } : { type: 'text' });
    if (wide) i.className = 'wide';
    i.value = value || '';
    i.addEventListener('input', function () { onInput(i.value); save(); });
    return i;
  }
  function select(options, value, onChange) {
    var s = el('select', {}, [el('option', { value: '', text: '(choose)' })].concat(options.map(function (o) { return el('option', { value: o, text: o }); })));
    s.value = value || '';
    s.addEventListener('change', function () { onChange(s.value); save(); rerender(); });
    return s;
  }
  function choices(name, list, value, onPick) {
    return el('div', { cls: 'choices' }, list.map(function (c, i) {
      var r = el('input', { type: 'radio', name: name, value: c.value });
      r.checked = value === c.value;
      r.addEventListener('change', function () { onPick(c.value); save(); rerender(); });
      return el('label', {}, [el('kbd', { text: c.key }), r, c.text]);
    }));
  }
  function source(s) {
    var cls = s.state === 'captured' ? 'captured' : (s.state === 'not captured' ? 'not-captured' : '');
    return el('div', {}, [
      el('span', { cls: 'badge ' + cls, text: s.state }),
      s.accessed_at ? el('span', { cls: 'badge', text: 'accessed ' + s.accessed_at }) : null,
      el('div', { cls: 'source', text: s.text })
    ]);
  }
  function context(c) {
    return el('div', { cls: 'context' }, [c.before, el('mark', { text: c.claim }), c.after]);
  }
  function keyBlock(o) {
    if (!o || !o.key) return null;
    var k = o.key;
    return el('div', { cls: 'key' }, [
      el('strong', { text: 'Uncertainty key (frozen): ' }), 'answerable: ' + k.answerable,
      k.required_caveats.length ? el('div', { text: 'required caveats: ' + k.required_caveats.join(' · ') }) : null,
      k.known_disputes.length ? el('div', { text: 'known disputes: ' + k.known_disputes.join(' · ') }) : null
    ]);
  }
  var claimChoices = L.claim.map(function (l, i) { return { key: String(i + 1), value: l, text: l }; });
  var secondaryChoices = [{ key: 'o', value: 'no', text: 'the original source' }, { key: 's', value: 'yes', text: 'only secondary' }];
  var pairChoices = [{ key: '1', value: 'yes', text: 'yes, fully supports' }].concat(L.pair_reasons.map(function (r, i) { return { key: String(i + 2), value: 'no:' + r, text: 'no: ' + r }; }));
  var uncChoices = L.uncertainty.map(function (u) { return { key: u.value, value: u.value, text: u.value + ' ' + u.text }; });
  var extChoices = [
    { key: '1', value: 'one', text: 'one factual claim, as extracted' },
    { key: '2', value: 'split', text: 'split: distinct assertions' },
    { key: '3', value: 'merge', text: 'merge: a repeat of another claim' },
    { key: '4', value: 'not_factual', text: 'not factual' }
  ];

  // --- what is done ---
  function extOf(id) { return st.ext[id] || (st.ext[id] = { choice: '', parts: '', merge_with: '', not_factual: '' }); }
  function partsOf(x) { return x.parts.split(L.part_separator).map(function (p) { return p.trim(); }); }
  function claimState(id) { return st.claim[id] || (st.claim[id] = { labels: [], reasons: [] }); }
  function needsReason(label) { return L.needs_reason.indexOf(label) >= 0; }
  function reasonName(label) { return label === 'contradicted' ? 'conflicting evidence and reasoning (required)' : (label === 'unverifiable' ? 'reason (required)' : 'reason'); }
  function labelled(label, reason) { return L.claim.indexOf(label) >= 0 && (L.needs_reason.indexOf(label) < 0 || (reason || '').trim() !== ''); }
  function extDone(id) {
    var x = extOf(id);
    if (x.choice === 'one') return true;
    if (x.choice === 'split') { var p = partsOf(x); return p.length >= 2 && p.every(function (s) { return s !== ''; }); }
    if (x.choice === 'merge') return x.merge_with !== '';
    if (x.choice === 'not_factual') return x.not_factual !== '';
    return false;
  }
  function nLabels(id) { var x = extOf(id); return x.choice === 'split' ? partsOf(x).length : 1; }
  function claimDone(id) {
    var x = extOf(id);
    if (x.choice === 'merge' || x.choice === 'not_factual') return extDone(id);
    if (!extDone(id)) return false;
    var c = claimState(id);
    for (var i = 0; i < nLabels(id); i++) { if (!labelled(c.labels[i], c.reasons[i])) return false; }
    return true;
  }
  function verdictDone(v) { return !!v && (v.supports === 'yes' || (v.supports === 'no' && L.pair_reasons.indexOf(v.reason) >= 0)); }
  function pairState(id) { return st.pair[id] || (st.pair[id] = { parts: [], secondary: '' }); }
  // A pair of a claim this reviewer split takes one verdict per part.
  function pairParts(p) { return nLabels(p.claim_item); }
  function pairDone(p) {
    var ps = st.pair[p.item_id];
    if (!ps || !ps.parts || (ps.secondary !== 'yes' && ps.secondary !== 'no')) return false;
    for (var i = 0; i < pairParts(p); i++) { if (!verdictDone(ps.parts[i])) return false; }
    return true;
  }
  function uncDone(id) { var u = st.unc[id]; return !!u && ['0', '1', '2'].indexOf(u.score) >= 0; }
  function citedOk(s) { return /^\s*(\d+\s*[;, ]\s*)*\d*\s*$/.test(s || ''); }
  function citedList(s) { return (s || '').split(/[;, ]+/).filter(function (v) { return v !== ''; }); }
  function addedDone(a) {
    if (!((a.claim || '').trim() !== '' && labelled(a.label, a.reason) && citedOk(a.cited))) return false;
    var v = citedList(a.cited_supports);
    return v.length === citedList(a.cited).length && v.every(function (x) { return x === 'yes' || (x.indexOf('no:') === 0 && L.pair_reasons.indexOf(x.slice(3)) >= 0); });
  }
  function adjDone(d) {
    var a = st.d[d.unit];
    if (!a || d.allowed.indexOf(a.final) < 0 || (a.rationale || '').trim() === '') return false;
    if (L.needs_reason.indexOf(a.final) >= 0 && (a.reason || '').trim() === '') return false;
    if (d.kind === 'pair' && a.final === 'no' && L.pair_reasons.indexOf(a.reason) < 0) return false;
    return true;
  }

  // --- cards ---
  function card(key, output, done, title, kids, keys) {
    var c = el('div', { cls: 'card', tabindex: '-1', 'data-key': key }, [el('h3', { text: title })].concat(kids));
    c.addEventListener('click', function () { focusKey(key, true); });
    return { key: key, output: output, done: done, el: c, keys: keys || {} };
  }
  function reviewCards(o) {
    var out = [];
    var otherClaims = o.claims.map(function (c) { return c.item_id; });
    o.claims.forEach(function (c) {
      var x = extOf(c.item_id);
      var kids = [el('div', { text: c.claim }), el('div', { cls: 'muted', text: 'line ' + c.line + (c.cited ? ' · cites ' + c.cited : ' · uncited') })];
      kids.push(choices('ext-' + c.item_id, extChoices, x.choice, function (v) { x.choice = v; }));
      var partsInput = text(x.parts, function (v) { x.parts = v; }, true);
      partsInput.setAttribute('data-role', 'parts');
      var mergeSelect = select(otherClaims.filter(function (id) { return id !== c.item_id; }), x.merge_with, function (v) { x.merge_with = v; });
      mergeSelect.setAttribute('data-role', 'merge');
      var nfSelect = select(L.not_factual, x.not_factual, function (v) { x.not_factual = v; });
      nfSelect.setAttribute('data-role', 'not_factual');
      if (x.choice === 'split') kids.push(field('parts, separated by ' + L.part_separator, true, partsInput));
      if (x.choice === 'merge') kids.push(field('repeats claim', true, mergeSelect));
      if (x.choice === 'not_factual') kids.push(field('kind', true, nfSelect));
      var k = {};
      extChoices.forEach(function (ch) { k[ch.key] = function () { x.choice = ch.value; save(); rerender(); var role = { split: 'parts', merge: 'merge', not_factual: 'not_factual' }[ch.value]; if (role) focusRole(role); }; });
      out.push(card('ext:' + c.item_id, o.output, function () { return extDone(c.item_id); }, 'Extraction check · ' + c.item_id, kids, k));
    });
    var addKids = [el('div', { cls: 'muted', text: 'A factual claim the extraction missed: press a (or the button), write it, link its citations (indices of this answer, e.g. 1;3, or none), label it.' })];
    var addButton = el('button', { type: 'button', text: 'add a missed claim' });
    addButton.addEventListener('click', function () { addClaim(o.output); });
    addKids.push(addButton);
    out.push(card('add:' + o.output, o.output, function () { return true; }, 'Missed claims · ' + o.output, addKids, {}));
    (st.added[o.output] || []).forEach(function (a, n) {
      var kids = [
        field('claim', true, text(a.claim, function (v) { a.claim = v; }, true, true)),
        field('cited (e.g. 1;3; empty if uncited)', false, text(a.cited, function (v) { a.cited = v; })),
        field('per cited source, in order: yes, or no:REASON (' + L.pair_reasons.join(', ') + '), e.g. yes;no:irrelevant', citedList(a.cited).length > 0, text(a.cited_supports, function (v) { a.cited_supports = v; }, true)),
        choices('added-' + a.id, claimChoices, a.label, function (v) { a.label = v; }),
        field(reasonName(a.label), needsReason(a.label), text(a.reason, function (v) { a.reason = v; }, true))
      ];
      kids[0].querySelector('textarea').setAttribute('data-role', 'added-text');
      kids[1].querySelector('input').setAttribute('data-role', 'cited');
      kids[2].querySelector('input').setAttribute('data-role', 'cited-supports');
      kids[4].querySelector('input').setAttribute('data-role', 'reason');
      var remove = el('button', { type: 'button', text: 'remove' });
      remove.addEventListener('click', function () { st.added[o.output].splice(n, 1); save(); rerender(); });
      kids.push(remove);
      var k = {};
      claimChoices.forEach(function (ch) { k[ch.key] = function () { a.label = ch.value; save(); rerender(); if (needsReason(ch.value)) focusRole('reason'); }; });
      k.e = function () { focusRole('added-text'); };
      k.c = function () { focusRole('cited'); };
      k.v = function () { focusRole('cited-supports'); };
      out.push(card('added:' + o.output + ':' + a.id, o.output, function () { return addedDone(a); }, 'Added claim ' + a.id, kids, k));
    });
    o.claims.forEach(function (c) {
      var x = extOf(c.item_id), s = claimState(c.item_id);
      var kids = [el('div', { cls: 'cols' }, [
        el('div', {}, [el('strong', { text: c.claim }), el('div', { cls: 'muted', text: 'in its answer:' }), context(c.context)]),
        el('div', {}, c.urls.map(function (u) { return el('div', { cls: 'muted', text: u }); }).concat(c.sources.map(source)))
      ])];
      var k = {};
      if (x.choice === 'merge' || x.choice === 'not_factual') {
        kids.push(el('div', { cls: 'muted', text: 'left out by the extraction check (' + (x.choice === 'merge' ? 'a repeat of ' + x.merge_with : 'not factual: ' + x.not_factual) + '): no label needed' }));
      } else if (!extDone(c.item_id)) {
        kids.push(el('div', { cls: 'muted', text: 'do the extraction check of this claim first' }));
      } else {
        var parts = x.choice === 'split' ? partsOf(x) : [null];
        parts.forEach(function (p, i) {
          if (p !== null) kids.push(el('div', { text: 'part ' + (i + 1) + ': ' + p }));
          kids.push(choices('claim-' + c.item_id + '-' + i, claimChoices, s.labels[i], function (v) { s.labels[i] = v; }));
          var r = text(s.reasons[i], function (v) { s.reasons[i] = v; }, true);
          r.setAttribute('data-role', 'reason');
          kids.push(field(reasonName(s.labels[i]), needsReason(s.labels[i]), r));
        });
        claimChoices.forEach(function (ch) {
          k[ch.key] = function () {
            var i = 0;
            while (i < parts.length - 1 && s.labels[i]) i++;
            if (parts.length > 1 && s.labels[i]) i = parts.length - 1;
            s.labels[i] = ch.value; save(); rerender();
            if (needsReason(ch.value)) focusRole('reason', i);
          };
        });
        k.Backspace = function () { s.labels.pop(); save(); rerender(); };
      }
      if (x.choice !== 'merge' && x.choice !== 'not_factual') {
        var mo = el('input', { type: 'checkbox' });
        mo.checked = !!s.missing_original;
        mo.addEventListener('change', function () { s.missing_original = mo.checked; save(); });
        kids.push(el('label', {}, [el('kbd', { text: 'm' }), mo, ' flag the missing original citation (no original source is cited: checked through primary evidence)']));
        k.m = function () { s.missing_original = !s.missing_original; save(); rerender(); };
      }
      out.push(card('claim:' + c.item_id, o.output, function () { return claimDone(c.item_id); }, 'Claim ' + c.item_id, kids, k));
    });
    o.pairs.forEach(function (p) {
      var ps = pairState(p.item_id);
      var n = pairParts(p);
      var valueOf = function (v) { return !v ? '' : (v.supports === 'yes' ? 'yes' : (v.supports === 'no' ? 'no:' + v.reason : '')); };
      var pick = function (i, v) { ps.parts[i] = v === 'yes' ? { supports: 'yes', reason: '' } : { supports: 'no', reason: v.slice(3) }; };
      var kids = [el('div', { cls: 'cols' }, [
        el('div', {}, [el('div', { text: p.claim }), el('div', { cls: 'muted', text: 'citation [' + p.cited + '] ' + p.url })]),
        source(p.source)
      ]), el('div', { cls: 'muted', text: n > 1 ? 'You split this claim: does the cited source fully support each part?' : 'Does the cited source fully support the claim?' })];
      var parts = n > 1 ? partsOf(extOf(p.claim_item)) : [null];
      parts.forEach(function (part, i) {
        if (part !== null) kids.push(el('div', { text: 'part ' + (i + 1) + ': ' + part }));
        kids.push(choices('pair-' + p.item_id + '-' + i, pairChoices, valueOf(ps.parts[i]), function (v) { pick(i, v); }));
      });
      kids.push(el('div', { cls: 'muted', text: 'Is the cited source the original source of the claim, or only secondary (it reports it from another source)?' }));
      kids.push(choices('secondary-' + p.item_id, secondaryChoices, ps.secondary, function (v) { ps.secondary = v; }));
      var k = {};
      pairChoices.forEach(function (ch) {
        k[ch.key] = function () {
          var i = 0;
          while (i < n - 1 && verdictDone(ps.parts[i])) i++;
          pick(i, ch.value); save(); rerender();
        };
      });
      secondaryChoices.forEach(function (ch) { k[ch.key] = function () { ps.secondary = ch.value; save(); rerender(); }; });
      out.push(card('pair:' + p.item_id, o.output, function () { return pairDone(p); }, 'Claim-citation pair ' + p.item_id + ' (claim ' + p.claim_item + ')', kids, k));
    });
    if (o.uncertainty_item) {
      var id = o.uncertainty_item;
      var u = st.unc[id] || (st.unc[id] = { score: '', abstained: false });
      var ab = el('input', { type: 'checkbox' });
      ab.checked = !!u.abstained;
      ab.addEventListener('change', function () { u.abstained = ab.checked; save(); });
      var kids = [keyBlock(o), el('details', {}, [el('summary', { text: 'the whole answer' }), el('div', { cls: 'output-text', text: o.output_text })]),
        choices('unc-' + id, uncChoices, u.score, function (v) { u.score = v; }),
        el('label', {}, [el('kbd', { text: 'x' }), ab, ' the answer declines to answer (abstained)'])];
      var k = {};
      uncChoices.forEach(function (ch) { k[ch.key] = function () { u.score = ch.value; save(); rerender(); }; });
      k.x = function () { u.abstained = !u.abstained; save(); rerender(); };
      out.push(card('unc:' + id, o.output, function () { return uncDone(id); }, 'Uncertainty handling ' + id, kids, k));
    }
    return out;
  }
  function addClaim(output) {
    st.seq = (st.seq || 0) + 1;
    (st.added[output] || (st.added[output] = [])).push({ id: 'a' + st.seq, claim: '', cited: '', label: '', reason: '' });
    save(); rerender();
    focusKey('added:' + output + ':a' + st.seq);
    focusRole('added-text');
  }
  function adjCards(d) {
    var a = st.d[d.unit] || (st.d[d.unit] = { final: '', reason: '', rationale: '' });
    var item = d.item || {};
    var show = [];
    if (item.claim) show.push(el('strong', { text: item.claim }));
    if (item.context) show.push(context(item.context));
    if (item.url) show.push(el('div', { cls: 'muted', text: 'citation [' + item.cited + '] ' + item.url }));
    if (item.output_text) show.push(el('details', {}, [el('summary', { text: 'the whole answer' }), el('div', { cls: 'output-text', text: item.output_text })]));
    var sources = item.source ? [item.source] : (item.sources || []);
    var list = d.kind === 'pair' ? pairChoices : d.allowed.map(function (l, i) { return { key: String(i + 1), value: l, text: l }; });
    var value = d.kind === 'pair' ? (a.final === 'yes' ? 'yes' : (a.final === 'no' ? 'no:' + a.reason : '')) : a.final;
    var pick = function (v) { if (d.kind === 'pair') { a.final = v === 'yes' ? 'yes' : 'no'; a.reason = v === 'yes' ? '' : v.slice(3); } else { a.final = v; } };
    var rationale = text(a.rationale, function (v) { a.rationale = v; }, true, true);
    rationale.setAttribute('data-role', 'rationale');
    var reason = text(a.reason, function (v) { a.reason = v; }, true);
    reason.setAttribute('data-role', 'reason');
    var kids = [
      el('div', { cls: 'cols' }, [el('div', {}, show), el('div', {}, sources.map(source))]),
      keyBlock(d.output),
      el('div', { cls: 'reviewers' }, d.reviewers.map(function (r) { return el('div', {}, [el('strong', { text: r.reviewer + ': ' + r.label }), r.reason ? '\n' + r.reason : '']); })),
      choices('adj-' + d.unit, list, value, pick),
      d.kind === 'pair' ? null : field(reasonName(a.final), needsReason(a.final), reason),
      field('rationale (written, required)', true, rationale)
    ];
    var k = {};
    list.forEach(function (ch) { k[ch.key] = function () { pick(ch.value); save(); rerender(); if (needsReason(ch.value)) focusRole('reason'); }; });
    k.r = function () { focusRole('rationale'); };
    var out = (d.output && d.output.output) || '';
    return [card('adj:' + d.unit, out, function () { return adjDone(d); }, 'Disagreement ' + d.unit + ' (' + d.kind + ')', kids, k)];
  }

  // --- layout ---
  function groups() {
    if (!ADJ) return D.outputs.map(function (o) { return { id: o.output, head: o, make: function () { return reviewCards(o); } }; });
    var by = {}, order = [];
    D.disagreements.forEach(function (d) { var o = (d.output && d.output.output) || ''; if (!by[o]) { by[o] = []; order.push(o); } by[o].push(d); });
    return order.map(function (o) { return { id: o, head: by[o][0].output, make: function () { return [].concat.apply([], by[o].map(adjCards)); } }; });
  }
  var G = groups();
  var sections = {};
  function section(g) {
    var sec = el('section', { cls: 'answer', id: 'answer-' + g.id }, [el('h2', { text: 'Answer ' + g.id })]);
    if (g.head && g.head.question) sec.appendChild(el('div', { cls: 'question' }, [el('strong', { text: (g.head.question_id || '') + ' ' }), g.head.question]));
    var made = g.make();
    made.forEach(function (c) { sec.appendChild(c.el); });
    sections[g.id] = { el: sec, cards: made };
    return sec;
  }
  function collect() { cards = [].concat.apply([], G.map(function (g) { return sections[g.id].cards; })); }
  function render() {
    var root = document.getElementById('sheet');
    root.textContent = '';
    if (ADJ) {
      var who = text(st.adjudicator, function (v) { st.adjudicator = v; }, false);
      who.setAttribute('data-role', 'adjudicator');
      root.appendChild(el('div', { cls: 'card' }, [field('adjudicator (a third person, not ' + D.reviewers.join(' or ') + ')', true, who)]));
      if (!D.disagreements.length) root.appendChild(el('p', { text: 'The reviewers agree on every item: nothing to adjudicate.' }));
    }
    G.forEach(function (g) { root.appendChild(section(g)); });
    collect();
    refresh();
  }
  // A choice re-renders the answer it belongs to, not the whole sheet.
  function rerender() {
    var c = cards[cur];
    if (!c) { render(); return; }
    var g = G.filter(function (x) { return x.id === c.output; })[0];
    // A field that had the focus (a select just changed) keeps it.
    var active = document.activeElement, role = active && active.getAttribute && active.getAttribute('data-role');
    var nth = role ? Array.prototype.indexOf.call(c.el.querySelectorAll('[data-role="' + role + '"]'), active) : -1;
    var old = sections[g.id].el;
    old.parentNode.replaceChild(section(g), old);
    collect();
    focusKey(c.key, false);
    if (nth >= 0) focusRole(role, nth);
  }
  function refresh() {
    var total = 0, done = 0, nav = document.getElementById('nav');
    nav.textContent = '';
    var per = {};
    cards.forEach(function (c, i) {
      var ok = c.done();
      c.el.classList.toggle('done', ok);
      if (ok) c.el.classList.remove('missing');
      var g = per[c.output] || (per[c.output] = { total: 0, done: 0, first: i });
      g.total++; total++;
      if (ok) { g.done++; done++; }
    });
    G.forEach(function (g) {
      var p = per[g.id] || { total: 0, done: 0, first: 0 };
      var bar = el('span', { cls: 'progress' }, [el('span', { style: 'width:' + (p.total ? Math.round(100 * p.done / p.total) : 100) + '%' })]);
      var li = el('li', { 'data-output': g.id, 'data-done': String(p.done), 'data-total': String(p.total) }, [g.id + ' ' + p.done + '/' + p.total, bar]);
      if (p.done === p.total) li.classList.add('done');
      if (cards[cur] && cards[cur].output === g.id) li.classList.add('current');
      li.addEventListener('click', function () { focus(p.first, true); });
      nav.appendChild(li);
    });
    var o = document.getElementById('overall');
    o.textContent = done + ' / ' + total + ' done';
    o.setAttribute('data-done', String(done));
    o.setAttribute('data-total', String(total));
  }
  function focus(i, scroll) {
    if (!cards.length) return;
    cur = Math.max(0, Math.min(cards.length - 1, i));
    cards.forEach(function (c, j) { c.el.classList.toggle('focus', j === cur); });
    cards[cur].el.focus({ preventScroll: true });
    if (scroll !== false) cards[cur].el.scrollIntoView({ block: 'nearest' });
    refresh();
  }
  function focusKey(key, scroll) { for (var i = 0; i < cards.length; i++) { if (cards[i].key === key) { focus(i, scroll); return; } } }
  function focusRole(role, n) {
    var all = cards[cur].el.querySelectorAll('[data-role="' + role + '"]');
    var f = all[n || 0] || all[0];
    if (f) f.focus();
  }

  // --- keyboard ---
  document.addEventListener('keydown', function (e) {
    var t = e.target, tag = t && t.tagName;
    if (tag === 'INPUT' || tag === 'TEXTAREA' || tag === 'SELECT') {
      if (e.key === 'Escape' || (e.key === 'Enter' && tag === 'INPUT')) { e.preventDefault(); t.blur(); focus(cur); }
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    var c = cards[cur];
    if (e.key === 'j' || e.key === 'ArrowDown') { e.preventDefault(); focus(cur + 1); return; }
    if (e.key === 'k' || e.key === 'ArrowUp') { e.preventDefault(); focus(cur - 1); return; }
    if (e.key === 'n') { for (var i = 1; i <= cards.length; i++) { var j = (cur + i) % cards.length; if (!cards[j].done()) { focus(j); return; } } return; }
    if (e.key === 'a' && !ADJ && c) { e.preventDefault(); addClaim(c.output); return; }
    if (c && c.keys[e.key]) { e.preventDefault(); c.keys[e.key](); }
  });

  // --- the file for `cohort review import` ---
  function rowsOf() {
    var rows = [], missing = [];
    if (ADJ) {
      if (!st.adjudicator.trim()) missing.push('adjudicator');
      D.disagreements.forEach(function (d) {
        var a = st.d[d.unit] || {};
        if (!adjDone(d)) missing.push('adj:' + d.unit);
        rows.push({ item_id: d.unit, final_label: a.final || '', reason: a.reason || '', rationale: a.rationale || '', adjudicator: st.adjudicator.trim() });
      });
      return { rows: rows, missing: missing };
    }
    var R = D.reviewer;
    D.outputs.forEach(function (o) {
      o.claims.forEach(function (c) {
        var x = extOf(c.item_id), s = claimState(c.item_id), r = { reviewer: R, item_id: c.item_id, kind: 'claim', output: o.output, label: '', reason: '', split: '', merge_with: '', not_factual: '', missing_original: s.missing_original ? 'yes' : '', note: '' };
        if (!extDone(c.item_id)) missing.push('ext:' + c.item_id);
        if (!claimDone(c.item_id)) missing.push('claim:' + c.item_id);
        if (x.choice === 'merge') r.merge_with = x.merge_with;
        else if (x.choice === 'not_factual') r.not_factual = x.not_factual;
        else {
          var n = nLabels(c.item_id), labels = [], reasons = [];
          for (var i = 0; i < n; i++) { labels.push(s.labels[i] || ''); reasons.push((s.reasons[i] || '').trim()); }
          var sep = ' ' + L.part_separator + ' ';
          if (x.choice === 'split') r.split = partsOf(x).join(sep);
          r.label = labels.join(sep);
          r.reason = reasons.every(function (v) { return v === ''; }) ? '' : reasons.join(sep);
        }
        rows.push(r);
      });
      (st.added[o.output] || []).forEach(function (a) {
        if (!addedDone(a)) missing.push('added:' + o.output + ':' + a.id);
        rows.push({ reviewer: R, item_id: a.id, kind: 'added', output: o.output, claim: (a.claim || '').trim(), cited: (a.cited || '').trim(), cited_supports: citedList(a.cited_supports).join(';'), label: a.label || '', reason: (a.reason || '').trim(), missing_original: a.missing_original ? 'yes' : '', note: '' });
      });
      o.pairs.forEach(function (p) {
        var ps = st.pair[p.item_id] || { parts: [] }, n = pairParts(p), sep = ' ' + L.part_separator + ' ';
        if (!pairDone(p)) missing.push('pair:' + p.item_id);
        var sup = [], why = [];
        for (var i = 0; i < n; i++) { var v = (ps.parts || [])[i] || {}; sup.push(v.supports || ''); why.push(v.reason || ''); }
        rows.push({ reviewer: R, item_id: p.item_id, kind: 'pair', output: o.output, supports: sup.join(sep), reason: why.every(function (v) { return v === ''; }) ? '' : why.join(sep), secondary: ps.secondary || '', note: '' });
      });
      if (o.uncertainty_item) {
        var u = st.unc[o.uncertainty_item] || {};
        if (!uncDone(o.uncertainty_item)) missing.push('unc:' + o.uncertainty_item);
        rows.push({ reviewer: R, item_id: o.uncertainty_item, kind: 'uncertainty', output: o.output, uncertainty: u.score || '', abstained: u.abstained ? 'yes' : 'no', note: '' });
      }
    });
    return { rows: rows, missing: missing };
  }
  // One row per line (row n on line n + 1), so the import's messages name a line.
  function labelsFile() {
    var got = rowsOf();
    var head = { kind: D.labels_kind, sheet_id: D.sheet_id, export_sha256: D.export_sha256 };
    if (ADJ) head.adjudicator = st.adjudicator.trim(); else head.reviewer = D.reviewer;
    var h = JSON.stringify(head);
    var body = h.slice(0, -1) + ',"rows":[\n' + got.rows.map(function (r) { return JSON.stringify(r); }).join(',\n') + '\n]}\n';
    return { text: body, missing: got.missing };
  }
  window.cohortSheet = { labelsFile: labelsFile, focusKey: focusKey, current: function () { return cards[cur] && cards[cur].key; } };
  document.getElementById('download').addEventListener('click', function () {
    var f = labelsFile();
    if (f.missing.length) {
      say(f.missing.length + ' required field(s) are empty (' + f.missing.slice(0, 5).join(', ') + (f.missing.length > 5 ? ', ...' : '') + '): fill them, then download', true);
      f.missing.forEach(function (k) { var c = cards.filter(function (x) { return x.key === k; })[0]; if (c) c.el.classList.add('missing'); });
      var first = cards.filter(function (x) { return f.missing.indexOf(x.key) >= 0; })[0];
      if (first) focusKey(first.key); else if (f.missing[0] === 'adjudicator') document.querySelector('[data-role="adjudicator"]').focus();
      return;
    }
    var a = el('a', { href: URL.createObjectURL(new Blob([f.text], { type: 'application/json' })), download: (ADJ ? 'adjudication' : 'labels-' + D.reviewer) + '.json' });
    document.body.appendChild(a);
    a.click();
    a.remove();
    say('saved ' + a.getAttribute('download') + ': import it with `cohort review import DIR FILE`');
  });
  render();
  focus(0, false);
})();
