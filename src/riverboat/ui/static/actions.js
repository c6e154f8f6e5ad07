// The dashboard's three bits of behaviour, without inline script or eval (its
// Content-Security-Policy allows neither): a confirmation before an action whose button
// says data-confirm (its text is an attribute, so a stored name in it is never read as
// code), the "all on page" box of the jobs list, and no refresh of a list while boxes
// are ticked in it (the swap would untick them). Listened for on the document, so all
// keep working after htmx swaps the live part of a page.
document.addEventListener("click", function (event) {
  var target = event.target instanceof Element ? event.target.closest("[data-confirm]") : null;
  if (target && !window.confirm(target.getAttribute("data-confirm"))) {
    event.preventDefault();
  }
});
document.addEventListener("change", function (event) {
  var box = event.target;
  if (box instanceof HTMLInputElement && box.id === "pick-all") {
    document.querySelectorAll("input.pick").forEach(function (pick) {
      pick.checked = box.checked;
    });
  }
});
document.addEventListener("htmx:beforeRequest", function (event) {
  var live = event.target;
  if (
    live instanceof Element &&
    live.hasAttribute("data-hold-while-picked") &&
    live.querySelector("input.pick:checked")
  ) {
    event.preventDefault();
  }
});
