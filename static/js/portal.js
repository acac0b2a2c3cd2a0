// Small behaviours shared by every page; no inline scripts, so a strict CSP holds.
document.addEventListener("change", (event) => {
  const field = event.target;
  if (field instanceof HTMLSelectElement && field.dataset.autosubmit !== undefined) {
    field.form.submit();
  }
});
