// Small behaviours shared by every page; no inline scripts, so a strict CSP holds.
document.addEventListener("change", (event) => {
  const field = event.target;
  if (field instanceof HTMLSelectElement && field.dataset.autosubmit !== undefined) {
    field.form.submit();
  }
  // A template picker: load the composer again, filled from the chosen template.
  if (field instanceof HTMLSelectElement && field.dataset.navigate !== undefined) {
    const url = new URL(window.location.href);
    if (field.value) {
      url.searchParams.set("template", field.value);
    } else {
      url.searchParams.delete("template");
    }
    window.location.assign(url.toString());
  }
});

// Forms that change something irreversible ask first (e.g. cancelling a job).
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
    event.preventDefault();
  }
});
