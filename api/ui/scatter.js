// A WebGL scatterplot of an embedding: pan (drag), zoom (wheel), hover
// (nearest point through a grid index), box selection (shift-drag).
//
// Every point is drawn into a texture, then the texture onto the canvas.
// While the user drags or wheels, frames move and scale that last picture
// (two triangles) and the points are drawn again once the input has rested
// for SETTLE_MS: without a GPU (SwiftShader, remote desktops) drawing
// 200,000 points takes a few hundred milliseconds, moving a picture a few.

const VERTEX = `
attribute vec2 a_pos;
attribute vec4 a_color;
uniform vec2 u_scale;
uniform vec2 u_offset;
uniform float u_size;
varying vec4 v_color;
void main() {
  gl_Position = vec4(a_pos * u_scale + u_offset, 0.0, 1.0);
  gl_PointSize = u_size;
  v_color = a_color;
}`;

const FRAGMENT = `
precision mediump float;
varying vec4 v_color;
void main() {
  vec2 d = gl_PointCoord - vec2(0.5);
  float r = dot(d, d);
  if (r > 0.25) discard;
  gl_FragColor = vec4(v_color.rgb, v_color.a * (1.0 - smoothstep(0.16, 0.25, r)));
}`;

function compile(gl, type, src) {
  const s = gl.createShader(type);
  gl.shaderSource(s, src);
  gl.compileShader(s);
  if (!gl.getShaderParameter(s, gl.COMPILE_STATUS)) throw new Error(gl.getShaderInfoLog(s));
  return s;
}

const BLIT_VERTEX = `
attribute vec2 a_uv;
uniform vec4 u_rect;
varying vec2 v_uv;
void main() {
  gl_Position = vec4(mix(u_rect.xy, u_rect.zw, a_uv), 0.0, 1.0);
  v_uv = a_uv;
}`;

const BLIT_FRAGMENT = `
precision mediump float;
uniform sampler2D u_tex;
varying vec2 v_uv;
void main() {
  gl_FragColor = texture2D(u_tex, v_uv);
}`;

function link(gl, vertex, fragment) {
  const prog = gl.createProgram();
  gl.attachShader(prog, compile(gl, gl.VERTEX_SHADER, vertex));
  gl.attachShader(prog, compile(gl, gl.FRAGMENT_SHADER, fragment));
  gl.linkProgram(prog);
  if (!gl.getProgramParameter(prog, gl.LINK_STATUS)) throw new Error(gl.getProgramInfoLog(prog));
  return prog;
}

const GRID = 256;
const SETTLE_MS = 150;

export class Scatter {
  constructor(container, { onHover, onSelect, onView } = {}) {
    this.container = container;
    this.canvas = document.createElement('canvas');
    this.canvas.className = 'gl';
    this.box = document.createElement('div');
    this.box.className = 'select-box';
    container.append(this.canvas, this.box);
    this.onHover = onHover || (() => {});
    this.onSelect = onSelect || (() => {});
    this.onView = onView || (() => {});
    // No multisampling: the points' edges are smoothed in the shader, and
    // without a GPU it doubles what a frame costs.
    const gl = this.canvas.getContext('webgl', { antialias: false, depth: false, preserveDrawingBuffer: true });
    if (!gl) throw new Error('WebGL is not available in this browser');
    this.gl = gl;
    const prog = link(gl, VERTEX, FRAGMENT);
    this.prog = prog;
    this.blit = link(gl, BLIT_VERTEX, BLIT_FRAGMENT);
    this.blitLoc = {
      uv: gl.getAttribLocation(this.blit, 'a_uv'),
      rect: gl.getUniformLocation(this.blit, 'u_rect'),
      tex: gl.getUniformLocation(this.blit, 'u_tex'),
    };
    this.quadBuf = gl.createBuffer();
    gl.bindBuffer(gl.ARRAY_BUFFER, this.quadBuf);
    gl.bufferData(gl.ARRAY_BUFFER, new Float32Array([0, 0, 1, 0, 0, 1, 1, 1]), gl.STATIC_DRAW);
    this.picture = null; // {tex, fbo, width, height, view, valid}
    this.moving = false; // the view follows input: frames move the picture
    this.settleTimer = 0;
    this.loc = {
      pos: gl.getAttribLocation(prog, 'a_pos'),
      color: gl.getAttribLocation(prog, 'a_color'),
      scale: gl.getUniformLocation(prog, 'u_scale'),
      offset: gl.getUniformLocation(prog, 'u_offset'),
      size: gl.getUniformLocation(prog, 'u_size'),
    };
    this.posBuf = gl.createBuffer();
    this.colorBuf = gl.createBuffer();
    this.n = 0;
    this.view = { cx: 0, cy: 0, zoom: 1 };
    this.frame = 0;
    this.drawn = 0; // frames drawn with points, for tests and the benchmark
    this.frames = 0; // every frame, the moved pictures included
    this._events();
    new ResizeObserver(() => this._resize()).observe(container);
    this._resize();
  }

  // xy: Float32Array of n (x, y) pairs (NaN rows are not drawn).
  setPoints(xy, n) {
    this.xy = xy;
    this.n = n;
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (let i = 0; i < n; i++) {
      const x = xy[2 * i], y = xy[2 * i + 1];
      if (x !== x || y !== y) continue;
      if (x < x0) x0 = x;
      if (x > x1) x1 = x;
      if (y < y0) y0 = y;
      if (y > y1) y1 = y;
    }
    if (!(x0 <= x1)) x0 = x1 = y0 = y1 = 0;
    this.bounds = { x0, x1, y0, y1 };
    this._buildGrid();
    const gl = this.gl;
    gl.bindBuffer(gl.ARRAY_BUFFER, this.posBuf);
    gl.bufferData(gl.ARRAY_BUFFER, xy.subarray(0, 2 * n), gl.STATIC_DRAW);
    this._invalidate();
    this.home();
  }

  setColors(rgba) {
    this.rgba = rgba;
    const gl = this.gl;
    gl.bindBuffer(gl.ARRAY_BUFFER, this.colorBuf);
    gl.bufferData(gl.ARRAY_BUFFER, rgba, gl.DYNAMIC_DRAW);
    this._invalidate();
    this.requestDraw();
  }

  // The view that fits every point.
  home() {
    const b = this.bounds;
    this.view = { cx: (b.x0 + b.x1) / 2, cy: (b.y0 + b.y1) / 2, zoom: 1 };
    this._rest();
  }

  setView(v) {
    this.view = { ...v };
    this._rest();
  }

  // The view changed by input: move the picture now, draw the points once
  // the input rests.
  _moved() {
    this.moving = true;
    clearTimeout(this.settleTimer);
    this.settleTimer = setTimeout(() => this._rest(), SETTLE_MS);
    this.requestDraw();
  }

  // The next frame draws every point.
  _rest() {
    clearTimeout(this.settleTimer);
    this.moving = false;
    this.requestDraw();
  }

  _invalidate() {
    if (this.picture) this.picture.valid = false;
  }

  // Data units per CSS pixel at zoom 1: the bounds fit with a margin.
  _baseScale() {
    const b = this.bounds || { x0: 0, x1: 1, y0: 0, y1: 1 };
    const w = Math.max(b.x1 - b.x0, 1e-9), h = Math.max(b.y1 - b.y0, 1e-9);
    return Math.max(w / (this.width * 0.9), h / (this.height * 0.9));
  }

  _unitsPerPixel() {
    return this._baseScale() / this.view.zoom;
  }

  toData(px, py) {
    const u = this._unitsPerPixel();
    return [this.view.cx + (px - this.width / 2) * u, this.view.cy - (py - this.height / 2) * u];
  }

  toScreen(x, y) {
    const u = this._unitsPerPixel();
    return [(x - this.view.cx) / u + this.width / 2, -(y - this.view.cy) / u + this.height / 2];
  }

  _resize() {
    const r = this.container.getBoundingClientRect();
    const dpr = window.devicePixelRatio || 1;
    this.width = Math.max(1, r.width);
    this.height = Math.max(1, r.height);
    this.canvas.width = Math.round(this.width * dpr);
    this.canvas.height = Math.round(this.height * dpr);
    this.dpr = dpr;
    this._invalidate();
    this._rest();
  }

  requestDraw() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.draw();
    });
  }

  pointSize() {
    const base = Math.max(1.5, Math.min(9, 420 / Math.sqrt(Math.max(this.n, 1))));
    return Math.min(24, base * Math.sqrt(this.view.zoom)) * this.dpr;
  }

  draw() {
    const gl = this.gl;
    const pic = this.picture;
    this.frames++;
    if (this.moving && pic && pic.valid) { // a resize invalidates it
      this._showPicture(this._pictureRect(pic.view));
      return;
    }
    if (!this.n || !this.rgba) {
      gl.bindFramebuffer(gl.FRAMEBUFFER, null);
      gl.viewport(0, 0, this.canvas.width, this.canvas.height);
      gl.clearColor(0, 0, 0, 0);
      gl.clear(gl.COLOR_BUFFER_BIT);
      return;
    }
    this._drawPoints();
    this._showPicture([-1, -1, 1, 1]);
    this.drawn++;
    if (this.drawn === 1) performance.mark('cellar:embedding-drawn', { detail: { points: this.n } });
    this.container.dataset.drawn = String(this.drawn);
  }

  // The texture the points are drawn into, the canvas's size.
  _target() {
    const gl = this.gl, w = this.canvas.width, h = this.canvas.height;
    let pic = this.picture;
    if (!pic || pic.width !== w || pic.height !== h) {
      if (pic) {
        gl.deleteFramebuffer(pic.fbo);
        gl.deleteTexture(pic.tex);
      }
      const tex = gl.createTexture();
      gl.bindTexture(gl.TEXTURE_2D, tex);
      gl.texImage2D(gl.TEXTURE_2D, 0, gl.RGBA, w, h, 0, gl.RGBA, gl.UNSIGNED_BYTE, null);
      for (const [k, v] of [[gl.TEXTURE_MIN_FILTER, gl.LINEAR], [gl.TEXTURE_MAG_FILTER, gl.LINEAR],
        [gl.TEXTURE_WRAP_S, gl.CLAMP_TO_EDGE], [gl.TEXTURE_WRAP_T, gl.CLAMP_TO_EDGE]])
        gl.texParameteri(gl.TEXTURE_2D, k, v);
      const fbo = gl.createFramebuffer();
      gl.bindFramebuffer(gl.FRAMEBUFFER, fbo);
      gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, tex, 0);
      pic = this.picture = { tex, fbo, width: w, height: h, view: null, valid: false };
    }
    return pic;
  }

  // Every point, into the picture.
  _drawPoints() {
    const gl = this.gl;
    const pic = this._target();
    gl.bindFramebuffer(gl.FRAMEBUFFER, pic.fbo);
    gl.viewport(0, 0, pic.width, pic.height);
    gl.clearColor(0, 0, 0, 0);
    gl.clear(gl.COLOR_BUFFER_BIT);
    gl.useProgram(this.prog);
    gl.enable(gl.BLEND);
    gl.blendFunc(gl.SRC_ALPHA, gl.ONE_MINUS_SRC_ALPHA);
    const u = this._unitsPerPixel();
    const sx = 2 / (this.width * u), sy = 2 / (this.height * u);
    gl.uniform2f(this.loc.scale, sx, sy);
    gl.uniform2f(this.loc.offset, -this.view.cx * sx, -this.view.cy * sy);
    gl.uniform1f(this.loc.size, this.pointSize());
    gl.bindBuffer(gl.ARRAY_BUFFER, this.posBuf);
    gl.enableVertexAttribArray(this.loc.pos);
    gl.vertexAttribPointer(this.loc.pos, 2, gl.FLOAT, false, 0, 0);
    gl.bindBuffer(gl.ARRAY_BUFFER, this.colorBuf);
    gl.enableVertexAttribArray(this.loc.color);
    gl.vertexAttribPointer(this.loc.color, 4, gl.UNSIGNED_BYTE, true, 0, 0);
    gl.drawArrays(gl.POINTS, 0, this.n);
    gl.disableVertexAttribArray(this.loc.pos);
    gl.disableVertexAttribArray(this.loc.color);
    gl.bindFramebuffer(gl.FRAMEBUFFER, null);
    pic.view = { ...this.view };
    pic.valid = true;
  }

  // Where the picture drawn at view v lies on the canvas now, in clip
  // coordinates [x0, y0, x1, y1].
  _pictureRect(v) {
    const u0 = this._baseScale() / v.zoom, u1 = this._unitsPerPixel();
    const halfW = this.width / 2, halfH = this.height / 2;
    const clipX = (x) => ((x - this.view.cx) / u1) / halfW;
    const clipY = (y) => ((y - this.view.cy) / u1) / halfH;
    return [clipX(v.cx - halfW * u0), clipY(v.cy - halfH * u0), clipX(v.cx + halfW * u0), clipY(v.cy + halfH * u0)];
  }

  // The picture onto the canvas at rect (clip coordinates).
  _showPicture(rect) {
    const gl = this.gl;
    gl.bindFramebuffer(gl.FRAMEBUFFER, null);
    gl.viewport(0, 0, this.canvas.width, this.canvas.height);
    gl.clearColor(0, 0, 0, 0);
    gl.clear(gl.COLOR_BUFFER_BIT);
    gl.disable(gl.BLEND);
    gl.useProgram(this.blit);
    gl.activeTexture(gl.TEXTURE0);
    gl.bindTexture(gl.TEXTURE_2D, this.picture.tex);
    gl.uniform1i(this.blitLoc.tex, 0);
    gl.uniform4f(this.blitLoc.rect, rect[0], rect[1], rect[2], rect[3]);
    gl.bindBuffer(gl.ARRAY_BUFFER, this.quadBuf);
    gl.enableVertexAttribArray(this.blitLoc.uv);
    gl.vertexAttribPointer(this.blitLoc.uv, 2, gl.FLOAT, false, 0, 0);
    gl.drawArrays(gl.TRIANGLE_STRIP, 0, 4);
    gl.disableVertexAttribArray(this.blitLoc.uv);
  }

  // A uniform grid over the bounds: cell -> the points in it (CSR-like).
  _buildGrid() {
    const { x0, x1, y0, y1 } = this.bounds;
    const n = this.n, xy = this.xy;
    const fx = GRID / Math.max(x1 - x0, 1e-12), fy = GRID / Math.max(y1 - y0, 1e-12);
    const cellOf = new Int32Array(n);
    const counts = new Int32Array(GRID * GRID + 1);
    for (let i = 0; i < n; i++) {
      const x = xy[2 * i], y = xy[2 * i + 1];
      if (x !== x || y !== y) {
        cellOf[i] = -1;
        continue;
      }
      const cx = Math.min(GRID - 1, Math.floor((x - x0) * fx));
      const cy = Math.min(GRID - 1, Math.floor((y - y0) * fy));
      const c = cy * GRID + cx;
      cellOf[i] = c;
      counts[c + 1]++;
    }
    for (let c = 0; c < GRID * GRID; c++) counts[c + 1] += counts[c];
    const fill = counts.slice(0, GRID * GRID);
    const items = new Int32Array(n);
    for (let i = 0; i < n; i++) if (cellOf[i] >= 0) items[fill[cellOf[i]]++] = i;
    this.grid = { start: counts, items, fx, fy };
  }

  // The nearest point within maxPx CSS pixels of (px, py), or -1.
  nearest(px, py, maxPx) {
    if (!this.n || !this.grid) return -1;
    const [x, y] = this.toData(px, py);
    const r = maxPx * this._unitsPerPixel();
    const { x0, y0 } = this.bounds;
    const { start, items, fx, fy } = this.grid;
    const cx0 = Math.max(0, Math.floor((x - r - x0) * fx)), cx1 = Math.min(GRID - 1, Math.floor((x + r - x0) * fx));
    const cy0 = Math.max(0, Math.floor((y - r - y0) * fy)), cy1 = Math.min(GRID - 1, Math.floor((y + r - y0) * fy));
    let best = -1, bestD = r * r;
    for (let cy = cy0; cy <= cy1; cy++)
      for (let cx = cx0; cx <= cx1; cx++) {
        const c = cy * GRID + cx;
        for (let k = start[c]; k < start[c + 1]; k++) {
          const i = items[k];
          const dx = this.xy[2 * i] - x, dy = this.xy[2 * i + 1] - y;
          const d = dx * dx + dy * dy;
          if (d <= bestD) {
            bestD = d;
            best = i;
          }
        }
      }
    return best;
  }

  // Indices of the points inside a screen rectangle.
  inRect(ax, ay, bx, by) {
    const [x0, y1] = this.toData(Math.min(ax, bx), Math.min(ay, by));
    const [x1, y0] = this.toData(Math.max(ax, bx), Math.max(ay, by));
    const out = [];
    for (let i = 0; i < this.n; i++) {
      const x = this.xy[2 * i], y = this.xy[2 * i + 1];
      if (x >= x0 && x <= x1 && y >= y0 && y <= y1) out.push(i);
    }
    return out;
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
      drag = { px, py, view: { ...this.view }, select: e.shiftKey, moved: false };
      c.setPointerCapture(e.pointerId);
    });
    c.addEventListener('pointermove', (e) => {
      const [px, py] = local(e);
      if (!drag) {
        const i = this.nearest(px, py, Math.max(6, this.pointSize() / this.dpr));
        this.onHover(i, px, py);
        return;
      }
      if (Math.abs(px - drag.px) + Math.abs(py - drag.py) > 3) drag.moved = true;
      if (drag.select) {
        Object.assign(this.box.style, {
          display: 'block',
          left: Math.min(px, drag.px) + 'px', top: Math.min(py, drag.py) + 'px',
          width: Math.abs(px - drag.px) + 'px', height: Math.abs(py - drag.py) + 'px',
        });
        return;
      }
      const u = this._unitsPerPixel();
      this.view = { ...drag.view, cx: drag.view.cx - (px - drag.px) * u, cy: drag.view.cy + (py - drag.py) * u };
      this.onHover(-1);
      this._moved();
    });
    const end = (e) => {
      if (!drag) return;
      const [px, py] = local(e);
      if (drag.select && drag.moved) this.onSelect(this.inRect(drag.px, drag.py, px, py));
      else if (!drag.moved) {
        const i = this.nearest(px, py, Math.max(6, this.pointSize() / this.dpr));
        if (i >= 0) this.onSelect([i]);
      } else this.onView(this.view);
      this.box.style.display = 'none';
      drag = null;
    };
    c.addEventListener('pointerup', end);
    c.addEventListener('pointercancel', end);
    c.addEventListener('pointerleave', () => !drag && this.onHover(-1));
    c.addEventListener('wheel', (e) => {
      e.preventDefault();
      const [px, py] = local(e);
      this.zoomAt(px, py, Math.exp(-e.deltaY * 0.0015));
    }, { passive: false });
  }

  // Zooms by factor about the screen point (px, py), which stays put.
  zoomAt(px, py, factor) {
    const [x, y] = this.toData(px, py);
    const zoom = Math.max(0.2, Math.min(5000, this.view.zoom * factor));
    this.view.zoom = zoom;
    const [x2, y2] = this.toData(px, py);
    this.view.cx += x - x2;
    this.view.cy += y - y2;
    this._moved();
    this.onView(this.view);
  }
}
