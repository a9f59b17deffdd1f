"""The page's own style sheet and scripts (no CDN: the page fetches nothing when it is viewed)."""

CSS = """
*{box-sizing:border-box}
body{margin:0;font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:#222;
background:#f6f7f9}
header{position:sticky;top:0;z-index:5;background:#fff;border-bottom:1px solid #ddd;padding:8px 16px}
h1{font-size:18px;margin:0 0 4px}
h2{font-size:16px;margin:18px 0 8px;border-bottom:1px solid #ddd;padding-bottom:3px}
h3{font-size:14px;margin:12px 0 6px}
main{padding:0 16px 40px}
nav a{margin-right:10px;color:#1f5fa8;text-decoration:none;font-size:13px}
.legend,.controls{display:flex;flex-wrap:wrap;gap:14px;align-items:center;margin:2px 0}
.lg{white-space:nowrap}
.sw{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:5px;vertical-align:-1px}
table{border-collapse:collapse;background:#fff;font-size:13px;margin:4px 0}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
thead th{background:#eef1f5}
.note{color:#777;font-size:12px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(380px,1fr));gap:10px}
.chart{background:#fff;border:1px solid #ddd;border-radius:4px;padding:4px}
.chart.wide{grid-column:1/-1}
.chart svg{width:100%;height:auto;display:block}
.chart .t{font-size:12px;font-weight:600}
.chart .empty{color:#999;font-size:12px;padding:20px}
.strip{display:flex;gap:8px;overflow-x:auto;padding-bottom:6px}
figure{margin:0;text-align:center;background:#fff;border:1px solid #ddd;padding:3px}
figcaption{font-size:12px;color:#555}
img.px{image-rendering:pixelated}
.tree{margin-left:14px;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
details>summary{cursor:pointer;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
details.config>summary{font-family:inherit;font-size:14px;font-weight:600;margin:6px 0}
.k{color:#6a3d9a}.v{color:#0b6e4f}
pre{background:#fff;border:1px solid #ddd;padding:6px;font-size:12px;overflow:auto}
#tip{position:fixed;display:none;pointer-events:none;background:rgba(255,255,255,.96);border:1px solid #999;
border-radius:3px;padding:4px 6px;font-size:12px;z-index:10;white-space:nowrap}
"""

# installed first in <body>: every script error is counted on <body data-errors>, its text in data-error-log
HEALTH_JS = """
(function(){var b=document.body;window.__flowrlErrors=[];
window.__flowrlError=function(msg){window.__flowrlErrors.push(String(msg));
b.dataset.errors=String(window.__flowrlErrors.length);b.dataset.errorLog=window.__flowrlErrors.join(' | ');};
window.onerror=function(msg,src,line,col){window.__flowrlError(msg+' (line '+line+':'+col+')');return false;};
window.addEventListener('unhandledrejection',function(e){window.__flowrlError('unhandled rejection: '+e.reason);});
})();
"""

CHART_JS = r"""
(function(){
'use strict';
var NS='http://www.w3.org/2000/svg';
var DATA=JSON.parse(document.getElementById('flowrl-data').textContent);
var RUNS=DATA.runs, W=420, H=230, M={l:58,r:10,t:22,b:30};
var tip=document.getElementById('tip');
var opts={smooth:0.6, band:true, raw:true};

function el(tag, attrs, parent){var e=document.createElementNS(NS,tag);
  for(var k in attrs){e.setAttribute(k,attrs[k]);} if(parent){parent.appendChild(e);} return e;}
function text(parent, x, y, s, attrs){var t=el('text', Object.assign({x:x,y:y,'font-size':10,fill:'#444'}, attrs||{}),
  parent); t.textContent=s; return t;}

// debiased EMA (as TensorBoard draws it); a null (NaN or inf logged) stays a gap and does not reset it
function ema(ys, w){var out=[], s=0, n=0;
  for(var i=0;i<ys.length;i++){var y=ys[i]; if(y===null){out.push(null);continue;}
    s=w*s+(1-w)*y; n++; out.push(w>0? s/(1-Math.pow(w,n)) : y);} return out;}

function niceStep(span, n){var raw=span/Math.max(n,1), p=Math.pow(10,Math.floor(Math.log10(raw))), f=raw/p;
  return (f<1.5?1:f<3?2:f<7?5:10)*p;}
function ticks(lo, hi, n){var st=niceStep(hi-lo,n), out=[], k0=Math.ceil(lo/st-1e-9);
  if(!(st>0)||!isFinite(st)){return {v:[lo], step:Math.abs(lo)||1};}
  for(var i=0;i<50;i++){var v=(k0+i)*st; if(v>hi+st*1e-9){break;} out.push(Math.abs(v)<st*1e-9?0:v);}
  return {v:out, step:st};}
function fmtTick(v, step){if(v===0){return '0';} var a=Math.abs(v);
  if(a>=1e5||a<1e-3){var d=Math.max(0,Math.min(6,Math.floor(Math.log10(a))-Math.floor(Math.log10(step)+1e-9)));
    return v.toExponential(d);}
  var dec=Math.max(0,Math.min(10,-Math.floor(Math.log10(step)+1e-9))); return v.toFixed(dec);}
function fmt(v){if(v===null||v===undefined){return 'NaN/inf';} var a=Math.abs(v);
  if(a!==0&&(a<1e-3||a>=1e6)){return v.toExponential(3);} return String(+v.toPrecision(5));}

// one chart: every run that logs spec.key, smoothed line over the raw values, +-std band where logged
function lineChart(box, spec){
  var lines=[];
  RUNS.forEach(function(run){
    var pts=run.series[spec.key]; if(!pts||!pts.length){return;}
    var xs=pts.map(function(p){return p[0];}), ys=pts.map(function(p){return p[1];});
    var sm=ema(ys, opts.smooth), band=null;
    if(spec.band&&run.series[spec.band]){
      var sd={}; run.series[spec.band].forEach(function(p){sd[p[0]]=p[1];});
      var sds=ema(xs.map(function(x){return sd[x]===undefined?null:sd[x];}), opts.smooth);
      band=sm.map(function(m,i){return (m===null||sds[i]===null)?null:[m-sds[i], m+sds[i]];});
    }
    lines.push({run:run, xs:xs, ys:ys, sm:sm, band:band});
  });
  var svg=el('svg',{viewBox:'0 0 '+W+' '+H,role:'img'}), n=0;
  text(svg, M.l, 14, spec.title, {'class':'t','font-size':12,fill:'#222'});
  var x0=Infinity,x1=-Infinity,y0=Infinity,y1=-Infinity;
  lines.forEach(function(L){L.xs.forEach(function(x,i){
    var vals=[L.sm[i]]; if(opts.raw){vals.push(L.ys[i]);}
    if(opts.band&&L.band&&L.band[i]){vals.push(L.band[i][0],L.band[i][1]);}
    vals.forEach(function(v){if(v!==null&&isFinite(v)){y0=Math.min(y0,v);y1=Math.max(y1,v);n++;}});
    if(L.ys[i]!==null){x0=Math.min(x0,x);x1=Math.max(x1,x);}
  });});
  box.innerHTML=''; box.appendChild(svg);
  if(!n){text(svg, W/2, H/2, 'no finite values', {'text-anchor':'middle',fill:'#999'}); return 0;}
  if(x1===x0){x0-=1;x1+=1;}
  // a flat series (to rounding: the debiased EMA of a constant wobbles in the last bits) gets a +-5 % range
  if(y1-y0<=1e-9*Math.max(Math.abs(y0),Math.abs(y1))){var mid=(y0+y1)/2, pad=Math.abs(mid)*0.05||1; y0=mid-pad; y1=mid+pad;}
  else {var pd=(y1-y0)*0.05; y0-=pd; y1+=pd;}
  var sx=function(x){return M.l+(x-x0)/(x1-x0)*(W-M.l-M.r);}, sy=function(y){return H-M.b-(y-y0)/(y1-y0)*(H-M.t-M.b);};
  var g=el('g',{},svg), yt=ticks(y0,y1,5), xt=ticks(x0,x1,6);
  yt.v.forEach(function(v){el('line',{x1:M.l,x2:W-M.r,y1:sy(v),y2:sy(v),stroke:'#eee'},g);
    text(g, M.l-4, sy(v)+3, fmtTick(v,yt.step), {'text-anchor':'end'});});
  xt.v.forEach(function(v){if(xt.step<1&&v%1){return;} el('line',{x1:sx(v),x2:sx(v),y1:M.t,y2:H-M.b,stroke:'#f2f2f2'},g);
    text(g, sx(v), H-M.b+12, fmtTick(v,Math.max(xt.step,1)), {'text-anchor':'middle'});});
  el('rect',{x:M.l,y:M.t,width:W-M.l-M.r,height:H-M.t-M.b,fill:'none',stroke:'#ccc'},g);
  text(g, W-M.r, H-4, 'iteration', {'text-anchor':'end',fill:'#888'});
  function path(xs, ys){var d='', pen=false;
    for(var i=0;i<xs.length;i++){if(ys[i]===null){pen=false;continue;}
      d+=(pen?'L':'M')+sx(xs[i]).toFixed(1)+' '+sy(ys[i]).toFixed(1); pen=true;} return d;}
  lines.forEach(function(L){
    var c=L.run.color;
    if(opts.band&&L.band){ // one polygon per unbroken stretch
      var seg=[]; var flush=function(){if(seg.length){
        var up=seg.map(function(s){return sx(s[0]).toFixed(1)+','+sy(s[2]).toFixed(1);});
        var dn=seg.slice().reverse().map(function(s){return sx(s[0]).toFixed(1)+','+sy(s[1]).toFixed(1);});
        el('polygon',{points:up.concat(dn).join(' '),fill:c,'fill-opacity':0.15,stroke:'none'},g);} seg=[];};
      L.xs.forEach(function(x,i){if(L.band[i]){seg.push([x,L.band[i][0],L.band[i][1]]);} else {flush();}}); flush();
    }
    if(opts.raw&&opts.smooth>0){el('path',{d:path(L.xs,L.ys),fill:'none',stroke:c,'stroke-opacity':0.3,'stroke-width':1},g);}
    el('path',{d:path(L.xs,L.sm),fill:'none',stroke:c,'stroke-width':1.8},g);
    if(L.xs.length<=40){L.xs.forEach(function(x,i){if(L.sm[i]!==null){
      el('circle',{cx:sx(x),cy:sy(L.sm[i]),r:2.2,fill:c},g);}});}
  });
  if(RUNS.length>1){var lx=W-M.r; lines.slice().reverse().forEach(function(L){
    var t=text(svg, lx, 14, L.run.name, {'text-anchor':'end',fill:L.run.color}); lx-=Math.min(140, 7*L.run.name.length+12);});}
  // hover: the nearest logged iteration of each run
  var cross=el('line',{y1:M.t,y2:H-M.b,stroke:'#999','stroke-dasharray':'3,3',visibility:'hidden'},svg);
  var hit=el('rect',{x:M.l,y:M.t,width:W-M.l-M.r,height:H-M.t-M.b,fill:'transparent'},svg);
  hit.addEventListener('mousemove',function(ev){
    var r=svg.getBoundingClientRect(), x=x0+((ev.clientX-r.left)*W/r.width-M.l)/(W-M.l-M.r)*(x1-x0), rows=[], bx=null;
    lines.forEach(function(L){var best=-1,bd=Infinity;
      L.xs.forEach(function(xx,i){var d=Math.abs(xx-x); if(d<bd){bd=d;best=i;}});
      if(best<0){return;} if(bx===null){bx=L.xs[best];}
      var s='<span style="color:'+L.run.color+'">&#9632;</span> '+L.run.name.replace(/</g,'&lt;')+' @'+L.xs[best]+': '+fmt(L.ys[best]);
      if(opts.smooth>0){s+=' (smoothed '+fmt(L.sm[best])+')';}
      if(L.band&&L.band[best]){s+=' ±'+fmt((L.band[best][1]-L.band[best][0])/2);}
      rows.push(s);});
    if(bx!==null){cross.setAttribute('x1',sx(bx));cross.setAttribute('x2',sx(bx));cross.setAttribute('visibility','visible');}
    tip.innerHTML=rows.join('<br>'); tip.style.display='block';
    tip.style.left=Math.min(ev.clientX+14, window.innerWidth-tip.offsetWidth-8)+'px'; tip.style.top=(ev.clientY+14)+'px';});
  hit.addEventListener('mouseleave',function(){tip.style.display='none';cross.setAttribute('visibility','hidden');});
  return n;
}

// mean seconds per phase of an iteration, one stacked bar per run
function phaseBars(box){
  var PC=['#4e79a7','#f28e2b','#59a14f','#e15759','#bab0ac'], names=DATA.phases.concat(['other']), rows=[];
  function mean(run,k){var p=run.series['timing_s/'+k]; if(!p){return null;} var s=0,c=0;
    p.forEach(function(q){if(q[1]!==null){s+=q[1];c++;}}); return c?s/c:null;}
  RUNS.forEach(function(run){var it=mean(run,'iteration'); if(it===null){return;}
    var parts=DATA.phases.map(function(k){return mean(run,k)||0;}), sum=parts.reduce(function(a,b){return a+b;},0);
    parts.push(Math.max(0,it-sum)); rows.push({run:run, parts:parts, it:Math.max(it,sum)});});
  box.innerHTML=''; if(!rows.length){box.style.display='none'; return 0;}
  var bh=22, h=34+rows.length*(bh+8)+18, w=900, l=150, r=70;
  var svg=el('svg',{viewBox:'0 0 '+w+' '+h,role:'img'}); box.appendChild(svg);
  text(svg, 6, 14, 'mean seconds per iteration, by phase', {'class':'t','font-size':12,fill:'#222'});
  var lx=l; names.forEach(function(nm,i){el('rect',{x:lx,y:20,width:10,height:10,fill:PC[i]},svg);
    text(svg, lx+13, 29, nm); lx+=13+7*nm.length+14;});
  var mx=Math.max.apply(null, rows.map(function(q){return q.it;}));
  rows.forEach(function(q,j){var y=38+j*(bh+8), x=l;
    text(svg, l-6, y+bh/2+4, q.run.name, {'text-anchor':'end',fill:q.run.color,'font-size':11});
    q.parts.forEach(function(v,i){var wd=v/mx*(w-l-r); if(wd<=0){return;}
      var rc=el('rect',{x:x,y:y,width:wd,height:bh,fill:PC[i]},svg);
      el('title',{},rc).textContent=names[i]+': '+fmt(v)+' s ('+(100*v/q.it).toFixed(1)+' %)';
      if(wd>38){text(svg, x+wd/2, y+bh/2+4, (100*v/q.it).toFixed(0)+'%', {'text-anchor':'middle',fill:'#fff'});}
      x+=wd;});
    text(svg, x+5, y+bh/2+4, fmt(q.it)+' s');});
  return rows.length;
}

function drawAll(){
  var drawn=0;
  DATA.sections.forEach(function(sec){
    var boxes=document.querySelectorAll('.chart[data-sec="'+sec.id+'"]');
    Array.prototype.forEach.call(boxes, function(box){
      var spec=sec.charts[+box.dataset.i];
      try{ if(lineChart(box, spec)>0){drawn++;} }
      catch(e){ window.__flowrlError(spec.key+': '+e); if(e&&e.stack){console.error(e.stack);} }
    });
  });
  var pb=document.getElementById('phase-bars');
  if(pb){try{ if(phaseBars(pb)>0){drawn++;} }catch(e){ window.__flowrlError('phase bars: '+e); if(e&&e.stack){console.error(e.stack);} }}
  document.body.dataset.charts=String(drawn);
  return drawn;
}

var slider=document.getElementById('smooth'), sv=document.getElementById('smooth-v');
slider.addEventListener('input',function(){opts.smooth=+slider.value; sv.textContent=(+slider.value).toFixed(2); drawAll();});
document.getElementById('band').addEventListener('change',function(e){opts.band=e.target.checked; drawAll();});
document.getElementById('raw').addEventListener('change',function(e){opts.raw=e.target.checked; drawAll();});
opts.smooth=+slider.value;
var drawn=drawAll();
document.body.dataset.rendered='1';
console.info('flowrl-report: rendered '+drawn+' charts, '+window.__flowrlErrors.length+' errors');
})();
"""
