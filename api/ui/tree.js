// A TreeData tree drawn from the viewport route only: the visible box
// (padded) is fetched after every pan or zoom, with at most a few thousand
// nodes, dense clades collapsed by the server.  x is the distance from the
// root, y the leaf order.

import { getJson } from './api.js';
import { categoryColor, rgbCss, viridisCss, MISSING } from './colors.js';

const PAD = 0.25;        // the fetched box reaches this much past the view
const MARGIN = 28;       // CSS pixels around the tree at the home view

export class TreeView {
  constructor(container, { onSelect, onView } = {}) {
    this.container = container;
    this.canvas = document.createElement('canvas');
    container.append(this.canvas);
    this.ctx = this.canvas.getContext('2d');
    this.onSelect = onSelect || (() => {});
    this.onView = onView || (() => {});
    this.nodes = [];
    this.known = new Map(); // id -> {x, y}: parents of nodes whose parent is off the box
    this.collapsed = new Map(); // clades the user collapsed: id -> range
    this.view = null;
    this.selected = null;
    this.seq = 0;
    this.fetches = 0;
    this._events();
    new ResizeObserver(() => this._resize()).observe(container);
    this._resize();
  }

  // path: the tree's route ({ad}/obst/{key}); color: {column, kind,
  // categories, range} or null.
  async setTree(path, info, color, view) {
    this.path = path;
    this.info = info;
    this.color = color;
    this.nodes = [];
    this.known.clear();
    this.collapsed.clear();
    this.selected = null;
    this.view = null;
    await this._fetch(view || null);
    if (!view) this.home();
    else this.view = { ...view };
    this.draw();
  }

  setColor(color) {
    this.color = color;
    return this._fetch(this.view);
  }

  home() {
    const e = this.extent;
    if (!e) return;
    const w = Math.max(this.width - 2 * MARGIN - 80, 10), h = Math.max(this.height - 2 * MARGIN, 10);
    const dx = Math.max(e.x1 - e.x0, 1e-9), dy = Math.max(e.y1 - e.y0, 1);
    this.view = {
      x0: e.x0 - (dx * MARGIN) / w, x1: e.x1 + (dx * (MARGIN + 80)) / w,
      y0: e.y0 - (dy * MARGIN) / h, y1: e.y1 + (dy * MARGIN) / h,
    };
    this.draw();
  }

  _resize() {
    const r = this.container.getBoundingClientRect();
    const dpr = window.devicePixelRatio || 1;
    this.width = Math.max(1, r.width);
    this.height = Math.max(1, r.height);
    this.canvas.width = Math.round(this.width * dpr);
    this.canvas.height = Math.round(this.height * dpr);
    this.dpr = dpr;
    this.draw();
  }

  sx(x) {
    return ((x - this.view.x0) / (this.view.x1 - this.view.x0)) * this.width;
  }

  sy(y) {
    return ((y - this.view.y0) / (this.view.y1 - this.view.y0)) * this.height;
  }

  maxNodes() {
    return Math.max(300, Math.min(4000, Math.round(this.height * 3)));
  }

  // The viewport around view (the whole tree when view is null).
  async _fetch(view) {
    const seq = ++this.seq;
    const params = { max_nodes: this.maxNodes() };
    if (view) {
      const px = (view.x1 - view.x0) * PAD, py = (view.y1 - view.y0) * PAD;
      Object.assign(params, { x0: view.x0 - px, x1: view.x1 + px, y0: view.y0 - py, y1: view.y1 + py });
    }
    if (this.color) params.obs_columns = this.color.column;
    this.fetches++;
    const vp = await getJson(this.path + '/viewport', params);
    if (seq !== this.seq) return;
    this.extent = vp.extent;
    this.truncated = vp.truncated;
    this.nodes = vp.nodes;
    if (this.known.size > 200000) this.known.clear();
    for (const n of vp.nodes) this.known.set(n.id, n);
    this.container.dataset.fetches = String(this.fetches);
    this.container.dataset.nodes = String(vp.nodes.length);
    this.draw();
  }

  // After a pan or zoom settles: the view snaps to 6 significant digits
  // (what the URL holds, so a shared URL draws the same), then its box is
  // fetched.
  _scheduleFetch() {
    clearTimeout(this.fetchTimer);
    this.fetchTimer = setTimeout(() => {
      const r = (v) => Number(v.toPrecision(6));
      const v = this.view;
      this.view = { x0: r(v.x0), x1: r(v.x1), y0: r(v.y0), y1: r(v.y1) };
      this.draw();
      this.onView(this.view);
      this._fetch(this.view).catch((e) => this.onError && this.onError(e));
    }, 140);
  }

  _hidden(n) {
    for (const c of this.collapsed.values())
      if (n.depth > c.depth && n.y >= c.y_min && n.y <= c.y_max) return true;
    return false;
  }

  nodeColor(n) {
    const c = this.color;
    if (!c || !n.obs) return null;
    const v = n.obs[c.column];
    if (c.kind === 'category') {
      const i = c.categories.indexOf(v);
      return i >= 0 ? rgbCss(categoryColor(i)) : rgbCss(MISSING);
    }
    if (v === null || v === undefined || v !== v) return rgbCss(MISSING);
    const span = c.range[1] - c.range[0];
    return viridisCss(span > 0 ? (v - c.range[0]) / span : 0.5);
  }

  draw() {
    const ctx = this.ctx;
    ctx.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
    ctx.clearRect(0, 0, this.width, this.height);
    if (!this.view) return;
    const rowPx = this.sy(1) - this.sy(0);
    const dot = Math.max(2, Math.min(5, rowPx * 0.35));
    const edges = new Path2D();
    const visible = this.nodes.filter((n) => !this._hidden(n));
    for (const n of visible) {
      if (n.parent === null) continue;
      const p = this.known.get(n.parent);
      const x = this.sx(n.x), y = this.sy(n.y);
      if (p) {
        edges.moveTo(this.sx(p.x), this.sy(p.y));
        edges.lineTo(this.sx(p.x), y);
      } else {
        edges.moveTo(Math.min(this.sx(this.view.x0), x), y);
      }
      edges.lineTo(x, y);
    }
    ctx.strokeStyle = '#7d8799';
    ctx.lineWidth = 1.2;
    ctx.stroke(edges);
    const wedges = visible.filter((n) => n.collapsed).map((n) => ({ n, r: n }));
    for (const [id, c] of this.collapsed) {
      const n = this.known.get(id) || c;
      wedges.push({ n, r: c, user: true });
    }
    for (const { n, r, user } of wedges) {
      const x = this.sx(n.x), y = this.sy(n.y);
      const xm = Math.max(this.sx(r.x_max), x + 10);
      const ya = this.sy(r.y_min - 0.35), yb = this.sy(r.y_max + 0.35);
      ctx.beginPath();
      ctx.moveTo(x, y);
      ctx.lineTo(xm, ya);
      ctx.lineTo(xm, yb);
      ctx.closePath();
      ctx.fillStyle = user ? 'rgba(247,37,133,0.18)' : 'rgba(76,201,240,0.16)';
      ctx.strokeStyle = user ? 'rgba(247,37,133,0.7)' : 'rgba(76,201,240,0.65)';
      ctx.fill();
      ctx.stroke();
      if (yb - ya > 12) {
        ctx.fillStyle = '#aab4c5';
        ctx.font = '11px system-ui, sans-serif';
        ctx.fillText(`${r.n_leaves.toLocaleString()} leaves`, xm + 4, (ya + yb) / 2 + 4);
      }
    }
    const labels = rowPx >= 11;
    ctx.font = '11px system-ui, sans-serif';
    for (const n of visible) {
      const x = this.sx(n.x), y = this.sy(n.y);
      if (x < -20 || x > this.width + 200 || y < -20 || y > this.height + 20) continue;
      const col = this.nodeColor(n);
      const r = n.is_leaf ? dot : Math.max(1.5, dot * 0.6);
      ctx.beginPath();
      ctx.arc(x, y, r, 0, 2 * Math.PI);
      ctx.fillStyle = col || (n.is_leaf ? '#d8deea' : '#7d8799');
      ctx.fill();
      if (this.selected === n.id) {
        ctx.lineWidth = 2;
        ctx.strokeStyle = '#ffb703';
        ctx.beginPath();
        ctx.arc(x, y, r + 3, 0, 2 * Math.PI);
        ctx.stroke();
      }
      if (labels && n.is_leaf) {
        ctx.fillStyle = '#c4cbd8';
        ctx.fillText(n.id, x + r + 4, y + 4);
      }
    }
    this.container.dataset.drawn = String((+this.container.dataset.drawn || 0) + 1);
  }

  // The node under a screen point (within 8 px), a collapsed clade's
  // wedge included, or null.
  hit(px, py) {
    let best = null, bestD = 64;
    for (const n of this.nodes) {
      if (this._hidden(n)) continue;
      const dx = this.sx(n.x) - px, dy = this.sy(n.y) - py;
      const d = dx * dx + dy * dy;
      if (d < bestD) {
        bestD = d;
        best = n;
      }
    }
    if (best) return best;
    for (const n of this.nodes) {
      if (!n.collapsed || this._hidden(n)) continue;
      if (px >= this.sx(n.x) && px <= this.sx(n.x_max) + 10 && py >= this.sy(n.y_min - 0.35) && py <= this.sy(n.y_max + 0.35))
        return n;
    }
    return null;
  }

  // Opens a clade the server collapsed: zooms to its box.
  zoomTo(n) {
    const dx = Math.max(n.x_max - n.x, 1e-9), dy = Math.max(n.y_max - n.y_min, 1);
    this.view = { x0: n.x - dx * 0.08, x1: n.x_max + dx * 0.25, y0: n.y_min - dy * 0.08 - 0.5, y1: n.y_max + dy * 0.08 + 0.5 };
    this.draw();
    this._scheduleFetch();
  }

  // Collapses the clade under node n (as drawn): its exact leaf range comes
  // from one viewport request over the box its leaves can lie in.
  async collapse(n, nLeaves) {
    const vp = await getJson(this.path + '/viewport', {
      x0: n.x, x1: this.extent.x1, y0: n.y - nLeaves, y1: n.y + nLeaves, max_nodes: 2000,
    });
    const byParent = new Map();
    for (const m of vp.nodes) {
      if (!byParent.has(m.parent)) byParent.set(m.parent, []);
      byParent.get(m.parent).push(m);
    }
    const self = vp.nodes.find((m) => m.id === n.id);
    let range = self && self.collapsed
      ? { y_min: self.y_min, y_max: self.y_max, x_max: self.x_max }
      : { y_min: Infinity, y_max: -Infinity, x_max: n.x };
    if (!self || !self.collapsed) {
      const stack = [n.id];
      while (stack.length) {
        for (const m of byParent.get(stack.pop()) || []) {
          range.y_min = Math.min(range.y_min, m.collapsed ? m.y_min : m.y);
          range.y_max = Math.max(range.y_max, m.collapsed ? m.y_max : m.y);
          range.x_max = Math.max(range.x_max, m.collapsed ? m.x_max : m.x);
          stack.push(m.id);
        }
      }
    }
    this.collapsed.set(n.id, { ...range, x: n.x, y: n.y, depth: n.depth, n_leaves: nLeaves });
    this.draw();
  }

  expand(id) {
    this.collapsed.delete(id);
    this.draw();
  }

  _events() {
    const c = this.canvas;
    let drag = null;
    const local = (e) => {
      const r = c.getBoundingClientRect();
      return [e.clientX - r.left, e.clientY - r.top];
    };
    c.addEventListener('pointerdown', (e) => {
      const [px, py] = local(e);
      drag = { px, py, view: { ...this.view }, moved: false };
      c.setPointerCapture(e.pointerId);
    });
    c.addEventListener('pointermove', (e) => {
      const [px, py] = local(e);
      if (!drag) {
        c.style.cursor = this.hit(px, py) ? 'pointer' : 'grab';
        return;
      }
      const dxp = px - drag.px, dyp = py - drag.py;
      if (Math.abs(dxp) + Math.abs(dyp) > 3) drag.moved = true;
      if (!drag.moved) return;
      const v = drag.view;
      const ux = (v.x1 - v.x0) / this.width, uy = (v.y1 - v.y0) / this.height;
      this.view = { x0: v.x0 - dxp * ux, x1: v.x1 - dxp * ux, y0: v.y0 - dyp * uy, y1: v.y1 - dyp * uy };
      this.draw();
    });
    c.addEventListener('pointerup', (e) => {
      if (!drag) return;
      const [px, py] = local(e);
      if (drag.moved) this._scheduleFetch();
      else {
        const n = this.hit(px, py);
        this.selected = n ? n.id : null;
        this.draw();
        if (n) this.onSelect(n);
      }
      drag = null;
    });
    c.addEventListener('wheel', (e) => {
      e.preventDefault();
      const [px, py] = local(e);
      // Shift zooms along the leaves only, Alt along the distance only.
      const f = Math.exp(e.deltaY * 0.0015);
      this.zoomAt(px, py, e.altKey ? 1 : f, e.shiftKey ? 1 : f);
    }, { passive: false });
  }

  // Scales the view by (fx, fy) about the screen point (px, py).
  zoomAt(px, py, fx, fy) {
    const v = this.view;
    const x = v.x0 + (px / this.width) * (v.x1 - v.x0), y = v.y0 + (py / this.height) * (v.y1 - v.y0);
    this.view = { x0: x - (x - v.x0) * fx, x1: x + (v.x1 - x) * fx, y0: y - (y - v.y0) * fy, y1: y + (v.y1 - y) * fy };
    this.draw();
    this._scheduleFetch();
  }
}
