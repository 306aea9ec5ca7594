// The coordinator's project page: refreshes the live figures, the curves and the published model
// from /stats every few seconds (the body's data-poll-seconds) and copies the project URL. It only
// sets text, attributes and rows the server worked out; it never builds markup from what it
// receives.
"use strict";

(function () {
  const page = document.body;

  function element(id) {
    return document.getElementById(id);
  }

  function toggle(id, visible) {
    const found = element(id);
    if (found) {
      found.hidden = !visible;
    }
  }

  function cell(text, className) {
    const td = document.createElement("td");
    td.textContent = String(text);
    if (className) {
      td.className = className;
    }
    return td;
  }

  function nameCell(leader) {
    const td = document.createElement("td");
    const link = document.createElement("a");
    link.textContent = String(leader.username);
    const url = String(leader.url);
    if (url.startsWith("/u/")) {
      link.setAttribute("href", url);
    }
    td.append(link);
    return td;
  }

  function showLeaders(leaders) {
    const rows = element("leaders");
    if (!rows || !Array.isArray(leaders)) {
      return;
    }
    rows.replaceChildren(...leaders.map(function (leader) {
      const shown = leader.display || {};
      const row = document.createElement("tr");
      row.append(
        cell(shown.rank, "num"),
        nameCell(leader),
        cell(shown.samples, "num"),
        cell(shown.compute, "num"),
      );
      return row;
    }));
    toggle("leaders-empty", leaders.length === 0);
  }

  function show(stats) {
    const shown = stats.display || {};
    for (const figure of document.querySelectorAll("[data-figure]")) {
      const text = shown[figure.dataset.figure];
      if (typeof text === "string" && figure.textContent !== text) {
        figure.textContent = text;
      }
    }
    const curve = stats.curve || {};
    const heldOut = curve.held_out || {};
    const floor = curve.floor || {};
    setPath("loss-path", curve.path, curve.points);
    setPath("held-out-path", heldOut.path, heldOut.points);
    setPath("held-out-dots", heldOut.dots, null);
    setPath("floor-path", floor.path, null);
    toggle("curve-empty", !(curve.points > 0 || heldOut.points > 0));
    toggle("curve-legend", heldOut.points > 0);
    toggle("floor-key", Boolean(floor.path));
    toggle("held-out", Boolean(stats.evaluation));
    toggle("held-out-floor", Boolean(shown.held_out_floor));
    toggle("stale", !stats.recent);
    showLeaders(stats.leaderboard);
    showModel(stats.model);
  }

  function setPath(id, data, points) {
    const path = element(id);
    if (path) {
      path.setAttribute("d", String(data || ""));
      if (points !== null) {
        path.setAttribute("data-points", String(points || 0));
      }
    }
  }

  function showModel(model) {
    const link = element("model-link");
    const url = model ? String(model.url || "") : "";
    // the server made it from the manifest's URL; anything but a web address is not a link
    if (link && /^https?:\/\//.test(url)) {
      link.setAttribute("href", url);
    }
    toggle("download", Boolean(model) && Boolean(link && link.getAttribute("href")));
    toggle("model_held_out-row", Boolean(model && model.held_out));
  }

  function poll(url, seconds) {
    fetch(url, { cache: "no-store", credentials: "omit", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.json();
      })
      .then(function (stats) {
        show(stats);
        page.classList.remove("unreachable");
        page.dataset.updates = String(Number(page.dataset.updates || 0) + 1);
      })
      .catch(function () {
        page.classList.add("unreachable");
      })
      .finally(function () {
        window.setTimeout(poll, seconds * 1000, url, seconds);
      });
  }

  function setUpCopy() {
    const button = element("copy-url");
    const source = element("project-url");
    const note = element("copy-done");
    if (!button || !source) {
      return;
    }
    button.hidden = false;
    button.addEventListener("click", function () {
      const text = source.textContent;
      const said = function (words) {
        if (note) {
          note.textContent = words;
        }
      };
      const select = function () {
        const range = document.createRange();
        range.selectNodeContents(source);
        const selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
        let copied = false;
        try {
          copied = document.execCommand("copy");
        } catch (error) {
          copied = false;
        }
        said(copied ? "Copied." : "Selected: press Ctrl+C (⌘C on a Mac) to copy.");
      };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(function () {
          said("Copied.");
        }, select);
      } else {
        select();
      }
    });
  }

  setUpCopy();
  const url = page.dataset.stats;
  if (url) {
    const seconds = Math.max(Number(page.dataset.pollSeconds) || 10, 0.2);
    window.setTimeout(poll, seconds * 1000, url, seconds);
  }
})();
