(function () {
  "use strict";
  function copy(button) {
    var source = document.getElementById(button.getAttribute("data-copy"));
    var status = button.parentNode.querySelector(".copied");
    var text = source ? source.textContent : "";
    function said(words) { if (status) { status.textContent = words; } }
    function fallback() {
      var range = document.createRange();
      range.selectNodeContents(source);
      var selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      var ok = false;
      try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
      said(ok ? "Copied." : "Selected: press Ctrl+C (Cmd+C) to copy.");
    }
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(function () { said("Copied."); }, fallback);
    } else {
      fallback();
    }
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button[data-copy]") : null;
    if (button) { copy(button); }
  });
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") { return; }
    var open = document.querySelectorAll("details.mark[open]");
    for (var i = 0; i < open.length; i++) {
      open[i].open = false;
      if (open[i].contains(document.activeElement)) { open[i].querySelector("summary").focus(); }
    }
  });
})();
