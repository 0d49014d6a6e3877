// Picket console: the key page follows the lock log (server-sent events from
// /console/live/...) and fetches its live part again on every change; countdowns tick.
"use strict";
(function () {
  const status = document.getElementById("live-status");
  const state = document.getElementById("key-state");
  if (status && state && window.EventSource) {
    const source = new EventSource(status.dataset.live);
    let refreshing = Promise.resolve();
    const refresh = (said) => {
      refreshing = refreshing.then(() =>
        fetch(state.dataset.state, { credentials: "same-origin" })
          .then((answer) => answer.ok ? answer.text() : Promise.reject(answer.status))
          .then((html) => {
            state.innerHTML = html;
            if (said) status.textContent = said;
            tick();
          })
          .catch((why) => { status.textContent = "Live: could not refresh (" + why + "); reload the page."; }));
    };
    source.addEventListener("open", () => { status.textContent = "Live: following the lock log."; });
    source.addEventListener("change", (event) => {
      state.dataset.revision = event.data;
      refresh("Live: updated at revision " + event.data + ".");
    });
    // The verify page also polls: what the replicas told a holder is not in the lock log.
    if (state.dataset.pollMs) setInterval(() => refresh(null), Number(state.dataset.pollMs));
    source.addEventListener("broken", (event) => {
      status.textContent = "Live: the lock log stream broke (" + event.data + "); reload the page.";
      source.close();
    });
    source.addEventListener("error", () => { status.textContent = "Live: reconnecting to the lock log…"; });
  }
  function tick() {
    for (const el of document.querySelectorAll("[data-expires-at-ms]")) {
      const left = Math.round((Number(el.dataset.expiresAtMs) - Date.now()) / 1000);
      el.textContent = left > 0 ? "expires in " + left + " s" : "expired";
    }
  }
  tick();
  setInterval(tick, 1000);
})();
