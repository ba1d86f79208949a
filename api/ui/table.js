// A paged obs table: every row, or the selected rows, PAGE at a time, each
// page one obs request for just those rows.

import { getJson } from './api.js';
import { fmt } from './colors.js';

const PAGE = 25;
const MAX_COLUMNS = 40;

export class ObsTable {
  constructor(el) {
    this.el = el;
    this.page = 0;
    this.rows = null; // selected row indices, or null for every row
    this.seq = 0;
  }

  // ad: the AnnData prefix; nRows: obs rows; schema: obs/schema.
  setSource(ad, nRows, schema) {
    this.ad = ad;
    this.nRows = nRows;
    this.columns = schema.columns.slice(0, MAX_COLUMNS).map((c) => c.name);
    this.dtypes = Object.fromEntries(schema.columns.map((c) => [c.name, c.dtype]));
    this.rows = null;
    this.page = 0;
    return this.render();
  }

  select(rows) {
    this.rows = rows && rows.length ? rows : null;
    this.page = 0;
    return this.render();
  }

  total() {
    return this.rows ? this.rows.length : this.nRows;
  }

  async render() {
    const seq = ++this.seq;
    const first = this.page * PAGE;
    const last = Math.min(this.total(), first + PAGE);
    const params = { columns: this.columns.join(',') };
    let indices;
    if (this.rows) {
      indices = this.rows.slice(first, last);
      params.rows = indices.join(',');
    } else {
      indices = Array.from({ length: last - first }, (_, k) => first + k);
      params.rows = `${first}:${last}`;
    }
    let page = null;
    if (indices.length) page = await getJson(this.ad + '/obs', params);
    if (seq !== this.seq) return;
    this._draw(page, indices, first, last);
  }

  _draw(page, indices, first, last) {
    const pages = Math.max(1, Math.ceil(this.total() / PAGE));
    const head = this.rows
      ? `<b>${this.rows.length.toLocaleString()}</b> selected cell${this.rows.length === 1 ? '' : 's'}
         <button class="link clear">show all</button>`
      : `<b>${this.nRows.toLocaleString()}</b> cells`;
    const cols = page ? page.columns : this.columns;
    let html = `<div class="table-head"><span>${head}</span><span class="pager">
      <button class="prev" ${this.page === 0 ? 'disabled' : ''}>‹</button>
      <span>${this.total() ? first + 1 : 0}–${last} · page ${this.page + 1} of ${pages}</span>
      <button class="next" ${this.page + 1 >= pages ? 'disabled' : ''}>›</button></span></div>`;
    html += '<div class="table-scroll"><table class="data"><thead><tr><th>#</th><th>obs name</th>';
    for (const c of cols) html += `<th title="${esc(this.dtypes[c] || '')}">${esc(c)}<small>${esc(this.dtypes[c] || '')}</small></th>`;
    html += '</tr></thead><tbody>';
    if (page) {
      page.index.forEach((name, r) => {
        html += `<tr data-row="${indices[r]}"><td class="num">${indices[r]}</td><td>${esc(name)}</td>`;
        for (const c of cols) {
          const v = page.data[c][r];
          html += `<td class="${typeof v === 'number' ? 'num' : ''}">${esc(fmt(v))}</td>`;
        }
        html += '</tr>';
      });
    }
    html += '</tbody></table></div>';
    this.el.innerHTML = html;
    this.el.querySelector('.prev').onclick = () => { this.page--; this.render(); };
    this.el.querySelector('.next').onclick = () => { this.page++; this.render(); };
    const clear = this.el.querySelector('.clear');
    if (clear) clear.onclick = () => this.onClear && this.onClear();
  }
}

export function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
}
