// The placement board's front end: draws the traits the Python side sets and sends what
// the user did as messages. No logic lives here: whether a drop, a replica count, a preset
// or an import is accepted is decided in Python (workbench/fdg/board.py), which answers by
// changing the traits (and `message`, with the reason for a refusal).
// Plain DOM and HTML5 drag and drop; nothing is fetched.

const MIME = "application/x-workbench-fragment";
// Okabe–Ito hues: told apart with the common colour-vision deficiencies
// (darkened where white text on them would be hard to read)
const PALETTE = ["#0072B2", "#C26A00", "#00806A", "#A8498A", "#2B7BB9", "#C14E00", "#6F6400", "#5E5E5E"];

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "style") el.style.cssText = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key in el && typeof value !== "string") el[key] = value;
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const color = (index) => PALETTE[index % PALETTE.length];
const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

// the controls that change the placement
const CHANGES = ".wb-presets button, [data-action=import], [data-action=apply-import], .wb-steps";
// kernel states after which this board's comm is dead for good
const KERNEL_GONE = { restarting: "restarted", autorestarting: "restarted", dead: "died" };

function render({ model, el }) {
  // gone: why the kernel no longer answers this board; lost: its connection dropped (for now)
  const ui = { panel: null, gone: "", lost: false };
  const root = h("div", { class: "wb-board" });
  el.append(root);

  // -- the kernel: a board whose kernel restarted or died says so and takes no more drags ----
  function kernelGone(why) {
    if (ui.gone) return;
    ui.gone = why;
    draw();
  }
  function send(message) {
    if (!live()) return;
    try {
      model.send(message);
    } catch (err) {  // the comm closed under us ("Cannot send"): the kernel is gone
      kernelGone("the kernel no longer answers this board");
    }
  }
  const kernel = model.widget_manager && model.widget_manager.kernel;
  const onKernelStatus = (_, status) => {
    if (KERNEL_GONE[status]) kernelGone(`the kernel ${KERNEL_GONE[status]}`);
  };
  if (kernel && kernel.statusChanged) kernel.statusChanged.connect(onKernelStatus);
  // ipywidgets marks every model's comm dead when its kernel restarts or dies, or while the
  // page's connection to it is down (and live again once it is back)
  const onCommLive = () => {
    if (!kernel || kernel.isDisposed || KERNEL_GONE[kernel.status]) {
      kernelGone("the kernel this board belonged to is gone");
    } else {
      ui.lost = !ui.lost;
      draw();
    }
  };
  model.on("comm_live_update", onCommLive);
  const live = () => !ui.gone && !ui.lost && model.get("cluster_live");

  // -- the parts drawn once ------------------------------------------------------------
  const policyLabel = h("span", { class: "wb-policy" });
  const presetBar = h("div", { class: "wb-presets" }, h("span", { class: "wb-muted" }, "start from"));
  for (const [key, label] of model.get("presets")) {
    presetBar.append(h("button", {
      class: "wb-button", "data-preset": key, title: `fill the board with the ${label} preset`,
      onclick: () => send({ type: "preset", name: key }),
    }, label));
  }
  const exportButton = h("button", { class: "wb-button", "data-action": "export",
    onclick: () => togglePanel("export") }, "Export JSON");
  const importButton = h("button", { class: "wb-button", "data-action": "import",
    onclick: () => togglePanel("import") }, "Import JSON");
  const head = h("div", { class: "wb-head" },
    h("div", { class: "wb-title" }, h("strong", {}, "Placement board"), policyLabel),
    presetBar, h("div", { class: "wb-io" }, exportButton, importButton));

  const text = h("textarea", { class: "wb-json", spellcheck: "false", rows: 10 });
  const copy = h("button", { class: "wb-button", onclick: copyJson }, "Copy");
  const apply = h("button", { class: "wb-button wb-primary", "data-action": "apply-import",
    onclick: () => send({ type: "import", text: text.value }) }, "Apply");
  const close = h("button", { class: "wb-button", onclick: () => togglePanel(null) }, "Close");
  const panelHint = h("span", { class: "wb-muted" });
  const panel = h("div", { class: "wb-panel", hidden: true }, text,
    h("div", { class: "wb-panel-row" }, panelHint, copy, apply, close));

  const message = h("div", { class: "wb-message", role: "status", "aria-live": "polite" });
  const statusText = h("span", { class: "wb-status-text" });
  const steps = h("input", { class: "wb-steps", type: "number", min: "1", step: "1",
    title: "steps per iteration the traffic is computed for" });
  steps.addEventListener("change", () => {
    const value = Number(steps.value);
    if (Number.isInteger(value) && value >= 1 && live()) { model.set("steps", value); model.save_changes(); }
    else steps.value = model.get("steps");
  });
  const wire = h("span", { class: "wb-wire" });
  const status = h("div", { class: "wb-status" },
    h("span", { class: "wb-dot" }), statusText,
    h("span", { class: "wb-spacer" }),
    h("label", { class: "wb-muted" }, "traffic per iteration of ", steps, " steps"), wire);

  const fragmentsList = h("div", { class: "wb-fragment-list" });
  const workersBox = h("div", { class: "wb-workers" });
  const clusterTitle = h("h3", {});
  const body = h("div", { class: "wb-body" },
    h("section", { class: "wb-fragments" },
      h("h3", {}, "Fragments ", h("span", { class: "wb-muted" }, "drag a name onto a device")),
      fragmentsList),
    h("section", { class: "wb-cluster" }, clusterTitle, workersBox));
  root.append(head, panel, message, status, body);

  // -- the JSON panel ----------------------------------------------------------------------
  function togglePanel(which) {
    ui.panel = ui.panel === which ? null : which;
    panel.hidden = ui.panel === null;
    exportButton.classList.toggle("wb-on", ui.panel === "export");
    importButton.classList.toggle("wb-on", ui.panel === "import");
    if (ui.panel === "export") {
      text.readOnly = true;
      text.value = model.get("policy_json");
      panelHint.textContent = "the board's policy: save it as FILE.json for --policy FILE.json";
    } else if (ui.panel === "import") {
      text.readOnly = false;
      text.value = "";
      text.placeholder = '{"name": "mine", "groups": [{"fragments": ["actor", "env"], "replicas": 2, "workers": ["0", "1"]}, …]}';
      panelHint.textContent = "paste a policy's JSON, then Apply";
      text.focus();
    }
    copy.hidden = ui.panel !== "export";
    apply.hidden = ui.panel !== "import";
  }

  async function copyJson() {
    text.select();
    try {
      await navigator.clipboard.writeText(text.value);
      panelHint.textContent = "copied";
    } catch (err) {
      panelHint.textContent = "selected: press Ctrl+C (the page may not allow clipboard access)";
    }
  }

  // -- dragging ----------------------------------------------------------------------------
  function dragSource(node, fragment) {
    node.draggable = live();
    node.dataset.fragment = fragment;
    node.addEventListener("dragstart", (event) => {
      if (!live()) { event.preventDefault(); return; }
      event.dataTransfer.setData(MIME, fragment);
      event.dataTransfer.setData("text/plain", fragment);
      event.dataTransfer.effectAllowed = "move";
      root.classList.add("wb-dragging");
    });
    node.addEventListener("dragend", () => root.classList.remove("wb-dragging"));
    return node;
  }

  function dropTarget(node, worker, device) {
    node.dataset.worker = worker;
    node.dataset.device = device;
    const accepts = (event) => live() && [...event.dataTransfer.types].some((t) => t === MIME || t === "text/plain");
    node.addEventListener("dragenter", (event) => { if (accepts(event)) event.preventDefault(); });
    node.addEventListener("dragover", (event) => {
      if (!accepts(event)) return;
      event.preventDefault();
      event.dataTransfer.dropEffect = "move";
      node.classList.add("wb-over");
    });
    node.addEventListener("dragleave", (event) => {
      if (!node.contains(event.relatedTarget)) node.classList.remove("wb-over");
    });
    node.addEventListener("drop", (event) => {
      event.preventDefault();
      event.stopPropagation();  // not a drop on the notebook
      node.classList.remove("wb-over");
      root.classList.remove("wb-dragging");
      if (!live()) return;
      const fragment = event.dataTransfer.getData(MIME) || event.dataTransfer.getData("text/plain");
      if (fragment) send({ type: "drop", fragment, worker, device });
    });
    return node;
  }

  // -- drawing the traits --------------------------------------------------------------------
  function drawFragment(row) {
    const count = h("input", { class: "wb-count", type: "number", min: "1", step: "1", disabled: !live(),
      value: String(row.replicas), title: `replicas of ${row.group}`, "aria-label": `replicas of ${row.name}` });
    const sendCount = (n) => send({ type: "replicas", fragment: row.name, count: n });
    count.addEventListener("change", () => {
      const n = count.value.trim() === "" ? null : Number(count.value);
      sendCount(Number.isFinite(n) ? n : count.value);
    });
    const stepper = h("div", { class: "wb-stepper" },
      h("button", { class: "wb-button wb-small", title: "one replica fewer", "data-action": "fewer", disabled: !live(),
        onclick: () => sendCount(row.replicas - 1) }, "−"),
      count,
      h("button", { class: "wb-button wb-small", title: "one replica more", "data-action": "more", disabled: !live(),
        onclick: () => sendCount(row.replicas + 1) }, "+"));
    const others = row.group.split("+").filter((f) => f !== row.name);
    const fused = others.length ? h("span", {}, "· fused with ", h("code", {}, others.join(", "))) : null;
    const where = row.workers.length ? [...new Set(row.workers)].join(", ") : "anywhere";
    const sends = row.sends.length
      ? row.sends.map((s) => h("li", {},
          h("code", {}, s.name), ` → ${s.to.join(", ")}`,
          s.text ? h("strong", { class: "wb-bytes" }, s.text) : null,
          h("span", { class: "wb-muted" }, ` ${s.timing}, ${s.spatial}`)))
      : [h("li", { class: "wb-muted" }, "nothing crosses processes")];
    return h("div", { class: "wb-card", "data-card": row.name, style: `--wb-group: ${color(row.color)}` },
      h("div", { class: "wb-card-top" },
        dragSource(h("span", { class: "wb-chip", title: `drag ${row.name} onto a device` },
          h("span", { class: "wb-grip" }, "⠿"), row.name), row.name),
        h("span", { class: "wb-rates" }, row.rates.map((r) => h("span", { class: "wb-rate" }, r))),
        h("span", { class: "wb-spacer" }), stepper),
      h("div", { class: "wb-card-where wb-muted" }, `×${row.replicas} on ${where} · ${row.device} `, fused),
      h("div", { class: "wb-sends" },
        h("span", { class: "wb-muted" }, "sends per iteration"),
        row.sends_text ? h("strong", { class: "wb-bytes" }, row.sends_text) : null,
        h("ul", {}, sends)));
  }

  function drawReplica(group, index) {
    return h("div", { class: "wb-replica", style: `--wb-group: ${color(group.color)}`,
      title: `${group.name}: replica ${index + 1} of ${group.replicas}` },
      group.fragments.map((f) => dragSource(h("span", { class: "wb-frag" }, f), f)),
      h("span", { class: "wb-idx" }, group.replicas > 1 ? `${index + 1}/${group.replicas}` : ""));
  }

  function drawSlot(worker, device, groups) {
    const here = [];
    for (const group of groups) {
      group.workers.forEach((w, i) => { if (w === worker.name && group.device === device) here.push(drawReplica(group, i)); });
    }
    let label = device === "cpu" ? `cpu · ${plural(worker.nthreads, "thread")}` : `gpu · ${worker.gpus}`;
    if (worker.left) label = device;
    const slot = h("div", { class: `wb-slot wb-${device}` },
      h("div", { class: "wb-slot-label" }, label),
      here.length ? here : h("div", { class: "wb-empty" }, "drop a fragment here"));
    if (device === "gpu" && !worker.gpus && !worker.left) slot.classList.add("wb-bad");
    return dropTarget(slot, worker.name, device);
  }

  function drawWorker(worker, groups) {
    const devices = ["cpu"];
    const gpuUsed = groups.some((g) => g.device === "gpu" && g.workers.includes(worker.name));
    if (worker.gpus > 0 || gpuUsed) devices.push("gpu");
    const facts = worker.left ? "left the cluster: move what is here, or pick a preset"
      : [worker.address, worker.memory].filter(Boolean).join(" · ");
    return h("div", { class: `wb-worker${worker.left ? " wb-left" : ""}`, "data-worker-box": worker.name },
      h("div", { class: "wb-worker-head" }, h("strong", {}, `worker ${worker.name}`),
        worker.gpus > 0 ? h("span", { class: "wb-badge" }, plural(worker.gpus, "GPU")) : null,
        h("div", { class: "wb-muted wb-small-text" }, facts)),
      devices.map((d) => drawSlot(worker, d, groups)));
  }

  function draw() {
    const name = model.get("policy_name");
    const mode = model.get("asynchronous") ? "async" : model.get("lag") ? `pipelined, lag ${model.get("lag")}` : "sync";
    policyLabel.textContent = name ? `policy ${JSON.stringify(name)} · ${mode}` : "no placement yet";
    const msg = model.get("message") || {};
    message.className = `wb-message wb-${msg.level || "none"}`;
    const prefix = { error: "Refused: ", ok: "✓ " }[msg.level] || "";
    message.textContent = msg.text ? `${prefix}${msg.text}` : "";
    message.hidden = !msg.text;
    const clusterLive = model.get("cluster_live");
    root.classList.toggle("wb-gone", !live());
    // what changes the placement is off; reading it (Export JSON) stays
    for (const control of root.querySelectorAll(CHANGES)) control.disabled = !live();
    status.classList.toggle("wb-running", live() && model.get("running"));
    statusText.textContent = ui.gone
      ? `Not connected: ${ui.gone}. This board shows the placement and workers as they were, and `
        + "takes no more changes; %fdg place makes a live one."
      : ui.lost ? "Not connected: the page lost its connection to the kernel; this board takes no changes until it is back."
      : model.get("status");
    if (document.activeElement !== steps) steps.value = model.get("steps");
    const note = model.get("sizes_note");
    wire.textContent = model.get("wire") ? `on the wire ≤ ${model.get("wire")}` : (note ? "bytes not measured" : "");
    wire.title = note || "bytes crossing processes per iteration (less where two groups share a worker)";
    if (ui.panel === "export") text.value = model.get("policy_json");

    const groups = model.get("groups");
    fragmentsList.replaceChildren(...model.get("fragments").map(drawFragment));
    if (note) fragmentsList.append(h("div", { class: "wb-muted wb-small-text" }, note));
    const workers = model.get("workers");
    const alive = workers.filter((w) => !w.left).length;
    clusterTitle.replaceChildren("Cluster ", h("span", { class: "wb-muted" }, live() && clusterLive
      ? `${plural(alive, "worker")}, live from the scheduler`
      : `${plural(alive, "worker")} as last seen: ${ui.gone || ui.lost ? "not connected" : "the scheduler does not answer"}`));
    workersBox.replaceChildren(...(workers.length ? workers.map((w) => drawWorker(w, groups))
      : [h("div", { class: "wb-empty" }, "no workers yet: they appear here as they join")]));
  }

  const traits = ["workers", "fragments", "groups", "policy_json", "policy_name", "asynchronous", "lag",
                  "steps", "wire", "sizes_note", "message", "status", "running", "cluster_live"];
  // one update from the kernel changes several traits: draw once for all of them
  let queued = false;
  const redraw = () => {
    if (queued) return;
    queued = true;
    queueMicrotask(() => { queued = false; draw(); });
  };
  for (const trait of traits) model.on(`change:${trait}`, redraw);
  draw();
  return () => {
    for (const trait of traits) model.off(`change:${trait}`, redraw);
    model.off("comm_live_update", onCommLive);
    if (kernel && kernel.statusChanged) kernel.statusChanged.disconnect(onKernelStatus);
  };
}

export default { render };
