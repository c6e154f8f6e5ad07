// The dashboard's two bits of behaviour, without inline script: a confirmation before
// an action whose button says data-confirm (its text is an attribute, so a stored name
// in it is never read as code), and the "all on page" box of the jobs list. Listened
// for on the document, so both keep working after htmx swaps the live part of a page.
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
